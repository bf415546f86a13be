"""Which tests of a registered Python file a PR adds or changes (registry/pychanges.py): per
test where the source tells, per class or file where it cannot."""

from __future__ import annotations

import textwrap

from kl_bitexact.registry.pychanges import changed_units
from kl_bitexact.suite.changes import Change

PATH = "test/registered/kl/test_kl.py"

BASE = '''\
"""KL tests."""
import unittest

from sglang.test.kl_test_utils import test_input_output_logprobs_match_helper
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=60, suite="stage-b-test-1-gpu")
MODEL = "m"


class TestPrefill(CustomTestCase):
    other_args = ["--page-size", "16"]

    def test_match(self):
        test_input_output_logprobs_match_helper(self.base_url, {}, MODEL, max_samples=4)

    def test_cache(self):
        """Resumes from the cache."""
        run_cache(self, 4)


class TestMixinUser(KLDivergenceMixin, DefaultServerBase):
    model = MODEL


def test_module_level():
    assert True


if __name__ == "__main__":
    unittest.main()
'''


def units(head: str, base: str | None = BASE) -> list[Change]:
    return changed_units(PATH, head, base)


def edited(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new)


def test_an_unchanged_file_has_nothing_to_prove():
    assert units(BASE) == []


def test_comments_docstrings_formatting_registration_and_main_block_do_not_count():
    head = edited('"""Resumes from the cache."""', '"""Reworded."""  # a comment')
    head = head.replace('est_time=60, suite="stage-b-test-1-gpu"', "est_time=90, suite='x'")
    head = head.replace("    unittest.main()", "    unittest.main(verbosity=2)")
    head = head.replace('["--page-size", "16"]', "[\n    '--page-size', '16',\n]")
    head = head.replace('"""KL tests."""', "")
    assert units(head) == []


def test_a_changed_method_is_its_own_unit():
    head = edited("max_samples=4)", "max_samples=8)")
    assert units(head) == [Change(f"{PATH}::TestPrefill::test_match", "changed")]


def test_an_added_method_and_function_are_new_units():
    head = edited(
        "def test_module_level():",
        "def test_another():\n    pass\n\n\ndef test_module_level():",
    )
    head = head.replace(
        "    def test_cache(self):",
        "    def test_decode(self):\n        run_cache(self, 8)\n\n    def test_cache(self):",
    )
    assert units(head) == [
        Change(f"{PATH}::test_another", "new"),
        Change(f"{PATH}::TestPrefill::test_decode", "new"),
    ]


def test_a_class_whose_setup_changed_is_one_unit():
    head = edited('"--page-size", "16"', '"--page-size", "64"')
    assert units(head) == [Change(f"{PATH}::TestPrefill", "changed")]


def test_a_class_with_inherited_tests_changes_as_a_class():
    # Its tests come from an imported mixin: only the class can be named.
    head = edited("    model = MODEL\n", "    model = MODEL\n    kl_div_thres = 1e-6\n")
    assert units(head) == [Change(f"{PATH}::TestMixinUser", "changed")]


def test_a_new_class_is_a_new_unit():
    head = BASE.replace(
        "\n\ndef test_module_level",
        "\n\nclass TestDecode(CustomTestCase):\n    def test_decode(self):\n        pass\n\n"
        "\ndef test_module_level",
    )
    assert units(head) == [Change(f"{PATH}::TestDecode", "new")]


def test_a_change_outside_tests_makes_the_whole_file_changed():
    for old, new in (
        ('MODEL = "m"', 'MODEL = "n"'),
        (
            "from sglang.test.test_utils import CustomTestCase",
            "from sglang.test.test_utils import CustomTestCase, popen_launch_server",
        ),
        ("\n\nclass TestPrefill", "\n\ndef run_cache(t, n):\n    return n\n\n\nclass TestPrefill"),
        ("\n\nclass TestPrefill", "\n\nclass Config:\n    pages = 16\n\n\nclass TestPrefill"),
    ):
        assert units(edited(old, new)) == [Change(PATH, "changed")], new


def test_a_file_new_unreadable_or_unparsable_on_base_is_one_new_unit():
    assert units(BASE, None) == [Change(PATH, "new")]
    assert units(BASE, "def broken(:\n") == [Change(PATH, "new")]
    # a head that does not parse cannot be split: the whole file (its run says why)
    assert units("class TestX(:\n") == [Change(PATH, "changed")]


def test_a_subclass_of_a_changed_class_of_the_file_changes_whole():
    base = textwrap.dedent(
        """
        class KLBase(CustomTestCase):
            page_size = 16

            def test_shared(self):
                check(self, 1)


        class TestSmallPages(KLBase):
            page_size = 1
        """
    )
    head = base.replace("check(self, 1)", "check(self, 2)")
    assert changed_units(PATH, head, base) == [
        Change(f"{PATH}::KLBase::test_shared", "changed"),
        Change(f"{PATH}::TestSmallPages", "changed"),
    ]
    head = base.replace("page_size = 16", "page_size = 32")
    assert changed_units(PATH, head, base) == [
        Change(f"{PATH}::KLBase", "changed"),
        Change(f"{PATH}::TestSmallPages", "changed"),
    ]


def test_a_source_nested_too_deep_for_the_parser_counts_whole():
    deep = "x = " + "(" * 100_000 + ")" * 100_000 + "\n"
    assert changed_units(PATH, deep, BASE) == [Change(PATH, "changed")]

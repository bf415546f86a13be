"""The minimal text edits of --fix on the layouts real files use."""

from __future__ import annotations

import pytest

from kl_bitexact.registry import pyedit, yamledit
from kl_bitexact.registry.edits import EditError


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # one item per line, trailing comma, comment kept on its line
        (
            'S = {\n    HWBackend.CUDA: [\n        "a",  # first\n    ],\n}\n',
            'S = {\n    HWBackend.CUDA: [\n        "a",  # first\n        "new",\n    ],\n}\n',
        ),
        # no trailing comma: one is added, nothing else moves
        (
            "S = {\n    HWBackend.CUDA: [\n        'a'\n    ],\n}\n",
            "S = {\n    HWBackend.CUDA: [\n        'a',\n        'new',\n    ],\n}\n",
        ),
        # inline list, quotes of the siblings
        ("S = {HWBackend.CUDA: ['a', 'b']}\n", "S = {HWBackend.CUDA: ['a', 'b', 'new']}\n"),
        # empty list
        ("S = {\n    HWBackend.CUDA: [],\n}\n", 'S = {\n    HWBackend.CUDA: ["new"],\n}\n'),
        # string keys, tuple values
        ('S = {"cuda": ("a",)}\n', 'S = {"cuda": ("a", "new",)}\n'),
        # a missing backend key is added in the style of the first key
        (
            'S = {\n    HWBackend.CPU: ["c"]\n}\n',
            'S = {\n    HWBackend.CPU: ["c"],\n    HWBackend.CUDA: ["new"],\n}\n',
        ),
        ("S: dict = {'cpu': ['c']}\n", "S: dict = {'cpu': ['c'], 'cuda': ['new']}\n"),
    ],
)
def test_python_dict_insertion(before, after):
    source = before.replace("S", "PER_COMMIT_SUITES", 1)
    expected = after.replace("S", "PER_COMMIT_SUITES", 1)
    assert pyedit.add_suite(source, "run_suite.py", "PER_COMMIT_SUITES", "cuda", "new") == expected


def test_python_edit_refuses_what_it_cannot_do_safely():
    with pytest.raises(EditError, match="no top-level `NIGHTLY_SUITES"):
        pyedit.add_suite("PER_COMMIT_SUITES = {}\n", "r.py", "NIGHTLY_SUITES", "cuda", "x")
    with pytest.raises(EditError, match="not a list literal"):
        pyedit.add_suite(
            "PER_COMMIT_SUITES = {'cuda': SUITES}\n", "r.py", "PER_COMMIT_SUITES", "cuda", "x"
        )
    with pytest.raises(EditError, match="refusing"):
        pyedit.add_suite(
            "PER_COMMIT_SUITES = {'cuda': ['a']}\n", "r.py", "PER_COMMIT_SUITES", "cuda", "x'"
        )


@pytest.mark.parametrize(
    ("before", "keys", "item", "after"),
    [
        (
            "# head\nsuites:\n  - a  # note\n\n# tail\n",
            ("suites",),
            "b",
            "# head\nsuites:\n  - a  # note\n  - b\n\n# tail\n",
        ),
        ("suites: [a, 'b']\nother: 1\n", ("suites",), "c", "suites: [a, 'b', c]\nother: 1\n"),
        ("other: 1\n", ("nightly",), "n", "other: 1\nnightly:\n  - n\n"),
        ("suites:\n- a\n", ("suites",), "true", "suites:\n- a\n- 'true'\n"),
        (
            "m:\n  include:\n    - stage: a\n      runner_config: r1\n      t: '5'\n"
            "    # end\nx: 1\n",
            ("m", "include"),
            {"stage": "b", "runner_config": "r2", "t": "5"},
            "m:\n  include:\n    - stage: a\n      runner_config: r1\n      t: '5'\n"
            "    - stage: b\n      runner_config: r2\n      t: '5'\n    # end\nx: 1\n",
        ),
        (
            "include:\n  - {stage: a, n: 1}\n",
            ("include",),
            {"stage": "b", "n": 2},
            "include:\n  - {stage: a, n: 1}\n  - {stage: b, n: 2}\n",
        ),
    ],
)
def test_yaml_sequence_append(before, keys, item, after):
    assert yamledit.append(before, "f.yaml", keys, item) == after


def test_yaml_edit_refuses_non_lists():
    with pytest.raises(EditError):
        yamledit.append("suites: 3\n", "f.yaml", ("suites",), "x")
    with pytest.raises(EditError):
        yamledit.append("suites:\n", "f.yaml", ("suites",), "x")

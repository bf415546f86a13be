"""The plugin's suite specs: where they come from and the errors that name the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.pytest_plugin.fixtures import suite_source

SERVER = {"engine": "reference", "args": ["--page-size", "16"]}


def test_an_inline_spec_and_a_test_with_overrides(tmp_path):
    mapping = {"name": "s", "server": SERVER, "tests": [{"name": "d", "check": "decode_cache_hit"}]}
    source = suite_source(pytest.mark.kl_suite(mapping).mark, tmp_path / "test_x.py")
    spec = source.test_spec("d", {"samples": 4, "min_cache_hit_ratio": 0.9})
    assert (spec.check, spec.samples, spec.min_cache_hit_ratio) == ("decode_cache_hit", 4, 0.9)
    assert source.test_spec("match", {}).check == "match"  # not in the spec: a check name


def test_a_yaml_file_with_several_suites_needs_a_name(tmp_path):
    path = tmp_path / "suites.yaml"
    path.write_text(
        "- {name: a, server: {engine: reference}, tests: [{name: m, check: match}]}\n"
        "- {name: b, server: {engine: reference}, tests: [{name: m, check: match}]}\n"
    )
    test_file = tmp_path / "test_x.py"
    with pytest.raises(ConfigError, match="exactly one suite, found 2"):
        suite_source(pytest.mark.kl_suite("suites.yaml").mark, test_file)
    chosen = suite_source(pytest.mark.kl_suite("suites.yaml", name="b").mark, test_file)
    assert chosen.mapping["name"] == "b"


def test_mistakes_name_the_file_and_key(tmp_path):
    test_file = tmp_path / "test_x.py"
    with pytest.raises(ConfigError, match="needs a suite spec"):
        suite_source(None, test_file)
    with pytest.raises(ConfigError, match="cannot read the kl_suite spec"):
        suite_source(pytest.mark.kl_suite("missing.yaml").mark, test_file)
    source = suite_source(pytest.mark.kl_suite({"name": "s", "server": SERVER}).mark, test_file)
    with pytest.raises(ConfigError, match=r"test_x.py: kl_suite marker: .*samples") as raised:
        source.test_spec("match", {"samples": 0})
    assert str(Path(test_file)) in raised.value.message

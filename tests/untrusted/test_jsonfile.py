"""untrusted.jsonfile.loads: JSON text that is not a file, with the file readers' bounds."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.untrusted import jsonfile


def test_loads_parses_plain_json():
    assert jsonfile.loads('{"a": [1, 2.5, "x", null]}') == {"a": [1, 2.5, "x", None]}
    assert jsonfile.loads(b"[]") == []


@pytest.mark.parametrize("depth", [jsonfile.MAX_DEPTH + 1, 100_000])
def test_loads_refuses_deep_nesting_as_a_value_error(depth: int):
    # 100,000 deep is past Python's recursion limit: it raised RecursionError (exit 3).
    with pytest.raises(jsonfile.TooDeep, match="nested more than 64 levels deep"):
        jsonfile.loads("[" * depth + "]" * depth)


def test_loads_at_the_depth_limit_parses():
    depth = jsonfile.MAX_DEPTH
    assert jsonfile.loads("[" * depth + "]" * depth) is not None


def test_loads_refuses_huge_integers_and_bad_syntax_as_value_errors():
    with pytest.raises(ValueError, match="an integer of 5000 digits"):
        jsonfile.loads("9" * 5000)
    with pytest.raises(json.JSONDecodeError):
        jsonfile.loads("{")

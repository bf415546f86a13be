from __future__ import annotations

import pytest

from kl_bitexact.compare.blockers import (
    BlockedVerdict,
    BlockerState,
    classify,
    effective_state,
    states_from_json,
)
from kl_bitexact.errors import ConfigError
from kl_bitexact.suite.references import BlockerRef, parse_ref


@pytest.mark.parametrize(
    "text",
    [
        "sgl-project/sglang#29792",
        "#29792",
        "https://github.com/sgl-project/sglang/pull/29792",
        "https://ghe.example.com/sgl-project/sglang/issues/29792/",
    ],
)
def test_reference_forms(text):
    assert parse_ref(text, default_repo="sgl-project/sglang") == BlockerRef(
        "sgl-project", "sglang", 29792
    )


@pytest.mark.parametrize("text", ["29792", "sglang#x", "#0", "owner/repo#12 extra", ""])
def test_malformed_reference_names_the_text(text):
    with pytest.raises(ConfigError, match="is not a pull request or issue reference"):
        parse_ref(text, default_repo="a/b")


def test_short_reference_needs_a_repository():
    with pytest.raises(ConfigError, match="no repository"):
        parse_ref("#5")


def test_str_is_canonical():
    assert str(parse_ref("#5", "o/r")) == "o/r#5"


@pytest.mark.parametrize(
    ("state", "red", "verdict"),
    [
        (BlockerState.OPEN, True, BlockedVerdict.EXPECTED_RED),
        (BlockerState.OPEN, False, BlockedVerdict.UNEXPECTED_GREEN),
        (BlockerState.MERGED, True, BlockedVerdict.REGRESSION),
        (BlockerState.MERGED, False, BlockedVerdict.UNBLOCKED),
        (BlockerState.CLOSED, True, BlockedVerdict.STALE_MARKER),
        (BlockerState.UNKNOWN, False, BlockedVerdict.UNKNOWN),
    ],
)
def test_classification_table(state, red, verdict):
    assert classify(state, red) is verdict


def test_any_open_blocker_keeps_a_test_blocked():
    assert effective_state([BlockerState.MERGED, BlockerState.OPEN]) is BlockerState.OPEN
    assert effective_state([BlockerState.MERGED, BlockerState.MERGED]) is BlockerState.MERGED
    assert effective_state([BlockerState.MERGED, BlockerState.UNKNOWN]) is BlockerState.UNKNOWN


def test_states_from_json_canonicalises_each_reference():
    document = {"Org/Repo#7": "open", "https://github.com/o/r/pull/9": "merged"}
    assert states_from_json(document, "states.json") == {
        str(parse_ref("Org/Repo#7")): BlockerState.OPEN,
        "o/r#9": BlockerState.MERGED,
    }
    assert states_from_json({}, "states.json") == {}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            ["o/r#1"],
            'states.json: blocker states must be an object like {"owner/repo#N": "open"}, not list',
        ),
        (
            {"o/r#1": "gone"},
            "states.json: o/r#1: state 'gone' is not one of open, merged, closed, unknown",
        ),
        ({"o/r#1": ["open"]}, "states.json: o/r#1: state ['open'] is not one of"),
        ({"#1": "open"}, "states.json: "),
    ],
)
def test_states_from_json_names_the_file_and_the_key(document, message):
    with pytest.raises(ConfigError) as raised:
        states_from_json(document, "states.json")
    assert raised.value.message.startswith(message)


def test_a_short_reference_in_states_keeps_what_to_do():
    with pytest.raises(ConfigError) as raised:
        states_from_json({"#1": "open"}, "states.json")
    assert (
        raised.value.message == "states.json: blocked_by '#1' has no repository and none is known"
    )
    assert raised.value.hint == "write owner/repo#N, or set GITHUB_REPOSITORY"

"""Blocker states: from GitHub's issue JSON, deduplicated lookups, and the states file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish import blocker_lookup as blocker_states
from kl_bitexact.results import model as r
from kl_bitexact.suite.references import parse_ref


@pytest.mark.parametrize(
    ("issue", "state"),
    [
        ({"state": "open", "pull_request": {"merged_at": None}}, BlockerState.OPEN),
        ({"state": "closed", "pull_request": {"merged_at": "2026-01-01T00:00:00Z"}}, "merged"),
        ({"state": "closed", "pull_request": {"merged_at": None}}, BlockerState.CLOSED),
        ({"state": "open"}, BlockerState.OPEN),
        ({"state": "closed", "state_reason": "completed"}, BlockerState.MERGED),
        ({"state": "closed"}, BlockerState.MERGED),  # closed before state_reason existed
        ({"state": "closed", "state_reason": "not_planned"}, BlockerState.CLOSED),
        ({"state": "closed", "state_reason": "duplicate"}, BlockerState.CLOSED),
    ],
)
def test_state_of_an_issue_or_pull(issue: Mapping[str, Any], state: str) -> None:
    assert blocker_states.state_of(issue) == BlockerState(state)


def test_each_reference_is_fetched_once_and_failures_are_unknown() -> None:
    asked: list[tuple[str, str, int]] = []

    def fetch(owner: str, repo: str, number: int) -> Mapping[str, Any]:
        asked.append((owner, repo, number))
        if number == 2:
            raise GitHubError("GitHub answered 404")
        return {"state": "open"}

    refs = [parse_ref("o/r#1"), parse_ref("o/r#2"), parse_ref("o/r#1")]
    resolved = blocker_states.resolve(refs, fetch)
    assert resolved.states == {"o/r#1": BlockerState.OPEN, "o/r#2": BlockerState.UNKNOWN}
    assert resolved.reasons == {"o/r#2": "lookup failed: GitHub answered 404"}
    assert asked == [("o", "r", 1), ("o", "r", 2)]


def test_the_scope_bounds_which_and_how_many_references_are_asked_about() -> None:
    # Issue 14, case 8: references from a results file cost one request each.
    asked: list[str] = []

    def fetch(owner: str, repo: str, number: int) -> Mapping[str, Any]:
        asked.append(f"{owner}/{repo}#{number}")
        return {"state": "open"}

    texts = ["o/r#1", "o/tools#2", "O/R#3", "x/y#4", "o/r#5"]
    scope = blocker_states.Scope.of("o/r", limit=3)
    assert scope.patterns == ("o/*",)
    resolved = blocker_states.resolve(sorted(map(parse_ref, texts)), fetch, scope)
    assert asked == ["O/R#3", "o/r#1", "o/r#5"]
    assert resolved.reasons == {
        "o/tools#2": "not looked up: over the limit of 3 lookups per run "
        "(--max-blocker-lookups raises it)",
        "x/y#4": "not looked up: x/y is outside the repositories blockers are looked up in "
        "(o/r, o/*; --blocker-repo adds more)",
    }
    assert set(resolved.states.values()) == {BlockerState.OPEN, BlockerState.UNKNOWN}
    only = blocker_states.Scope.of("o/r", ["x/*"], limit=0)
    assert [only.allows(parse_ref(t)) for t in texts] == [True, False, True, True, True]
    assert (
        blocker_states.resolve([parse_ref("o/r#1")], fetch, only)
        .reasons["o/r#1"]
        .startswith("not looked up: over the limit of 0")
    )


def test_refs_in_results_are_distinct_canonical_and_skip_non_references() -> None:
    test = r.TestResult(
        id="t",
        check="match",
        status=r.Status.FAILED,
        blocked_by=("#5", "https://github.com/o/r/pull/5", "x/y#1", "not a ref"),
    )
    results = r.Results(suites=(r.SuiteResult("s", r.ServerInfo("reference"), (test,)),))
    assert [str(ref) for ref in blocker_states.refs_in(results, "o/r")] == ["o/r#5", "x/y#1"]


def test_states_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "states.json"
    states = {"o/r#2": BlockerState.MERGED, "o/r#1": BlockerState.OPEN}
    path.write_text(blocker_states.dumps(states))
    assert json.loads(path.read_text()) == {"o/r#1": "open", "o/r#2": "merged"}
    assert blocker_states.load(path) == states
    path.write_text('{"o/r#1": "maybe"}')
    with pytest.raises(ConfigError, match="state 'maybe' is not one of"):
        blocker_states.load(path)
    path.write_text("x" * (blocker_states.MAX_STATES_BYTES + 1))
    with pytest.raises(ConfigError, match="byte limit for blocker states"):
        blocker_states.load(path)
    with pytest.raises(ConfigError, match="cannot read"):
        blocker_states.load(tmp_path / "missing.json")

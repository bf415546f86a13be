"""`kl-bitexact publish` end to end against the spec-checked local GitHub."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import process_groups
import pytest
from gh_constants import FAST_ENV, REPO, TOKEN

from kl_bitexact import cli
from kl_bitexact.publish import labeller
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run

HEAD_SHA = "d" * 40
AUTHOR = "alice"  # opened pull request #7
MAINTAINER = "maint"  # may vouch for its blocked_by markers
LABEL = "kl-bitexact-blocked-ok"
BLOCKERS = {
    "open": {"pulls": [{"number": 11, "state": "open"}]},
    "merged": {"pulls": [{"number": 12, "state": "closed", "merged": True}]},
    "closed": {"pulls": [{"number": 13, "state": "closed"}]},
}


def _test(test_id: str, red: bool = False, blocked_by: tuple[str, ...] = ()) -> r.TestResult:
    return r.TestResult(
        id=test_id,
        check="multiturn",
        status=r.Status.FAILED if red else r.Status.PASSED,
        kl_div=9.53e-05 if red else 0.0,
        kl_threshold=1e-9,
        exact=r.ExactMatch(tokens=4096, mismatched=1040 if red else 0),
        cache_hits=r.CacheHits(hit=32, total=32, min_ratio=0.99, expected=32),
        blocked_by=blocked_by,
    )


def _write(path: Path, *tests: r.TestResult, commit: str = HEAD_SHA) -> Path:
    suite = r.SuiteResult("hicache-mamba", r.ServerInfo("reference"), tests)
    results_io.write_atomic(r.Results(run=r.RunInfo(commit=commit), suites=(suite,)), path)
    return path


@pytest.fixture
def env(fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a publish step on pull request #7, pointed at the fake."""
    fake_github.world.seed(
        {
            "repos": {
                REPO: {
                    "pulls": [
                        {"number": 7, "head_sha": HEAD_SHA, "base_ref": "main", "author": AUTHOR}
                    ]
                }
            }
        }
    )
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    values = {
        **FAST_ENV,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKFLOW": "bitexact",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "4242",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def _comments(fake_github: FakeGitHub) -> list[str]:
    return [comment.body for comment in fake_github.world.repos[REPO].comments]


def _statuses(fake_github: FakeGitHub) -> list[dict[str, Any]]:
    return fake_github.world.repos[REPO].statuses


def _comment_writes(fake_github: FakeGitHub) -> list[str]:
    return [
        entry["method"]
        for entry in fake_github.world.requests
        if entry["method"] != "GET" and "/statuses/" not in entry["path"]
    ]


def test_publish_creates_then_edits_then_leaves_the_comment_alone(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    green = _write(tmp_path / "green.json", _test("t::a"), _test("t::b"))
    red = _write(tmp_path / "red.json", _test("t::a"), _test("t::b", red=True))
    assert cli.main(["publish", str(green)]) == 0
    assert cli.main(["publish", str(red), "--annotations"]) == 1
    assert any(line.startswith("::error ") for line in capsys.readouterr().out.splitlines())
    assert cli.main(["publish", str(red)]) == 1
    assert _comment_writes(fake_github) == ["POST", "PATCH"]
    (body,) = _comments(fake_github)
    assert body.startswith("<!-- kl-bitexact:bitexact -->\n")
    assert "gate failed: 1 failing (no base result)" in body
    states = [(s["sha"], s["state"], s["context"]) for s in _statuses(fake_github)]
    assert (
        states
        == [(HEAD_SHA, "success", "kl-bitexact")] + [(HEAD_SHA, "failure", "kl-bitexact")] * 2
    )
    assert _statuses(fake_github)[-1]["description"] == "gate failed: 1 failing (no base result)"
    assert (
        _statuses(fake_github)[-1]["target_url"]
        == "https://github.com/octo/engine/actions/runs/4242"
    )
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.count("kl-bitexact: gate") == 3  # appended by each step
    out = capsys.readouterr().out.splitlines()
    assert (
        out[-1] == "kl-bitexact: comment unchanged (id 1001); status failure: "
        "gate failed: 1 failing (no base result)"
    )


def test_the_status_goes_to_the_commit_that_was_tested(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    tested = "a" * 40  # the PR has moved on to HEAD_SHA since this run started
    Path(env["GITHUB_EVENT_PATH"]).write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"sha": tested}}})
    )
    results = _write(tmp_path / "r.json", _test("t::a"), commit=tested)
    assert cli.main(["publish", str(results)]) == 0
    assert [s["sha"] for s in _statuses(fake_github)] == [tested]


@pytest.mark.parametrize("event", ["pull_request", "workflow_run", "--sha"])
def test_results_of_another_commit_mark_nothing_and_both_shas_are_named(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    event: str,
) -> None:
    # Issue 30, item 1: under workflow_run the reusable workflow checked out the default
    # branch (github.sha) and a PR head got `success` for it.
    default_branch, pr_head = "c" * 40, "a" * 40
    payloads = {
        "pull_request": {"pull_request": {"number": 7, "head": {"sha": pr_head}}},
        "workflow_run": {"workflow_run": {"head_sha": pr_head, "pull_requests": [{"number": 7}]}},
        "--sha": {"pull_request": {"number": 7}},
    }
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(payloads[event]))
    results = _write(tmp_path / "r.json", _test("t::a"), commit=default_branch)
    extra = ["--sha", pr_head] if event == "--sha" else []
    assert cli.main(["publish", str(results), *extra]) == 2
    error = capsys.readouterr().err
    assert f"the results tested commit {default_branch}, but the status would go to {pr_head}" in (
        error
    )
    assert _statuses(fake_github) == [] and _comments(fake_github) == []


def test_shards_of_two_commits_are_refused(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _write(tmp_path / "results-a" / "results.json", _test("t::a"))
    other = _write(tmp_path / "results-b" / "results.json", _test("t::b"), commit="e" * 40)
    assert cli.main(["publish", str(one), str(other)]) == 2
    assert f"tested commit {HEAD_SHA} but {other} tested {'e' * 40}" in capsys.readouterr().err
    assert _statuses(fake_github) == []


def test_results_with_no_commit_may_mark_a_failure_never_a_pass(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    green = tmp_path / "green.json"
    suite = r.SuiteResult("s", r.ServerInfo("reference"), (_test("t::a"),))
    results_io.write_atomic(r.Results(suites=(suite,)), green)
    assert cli.main(["publish", str(green)]) == 2
    assert "record no tested commit (run.commit), so a pass cannot go to" in (
        capsys.readouterr().err
    )
    # Every shard missing: nothing was tested, and the failure says so on the PR head.
    assert cli.main(["publish", "--expected-shards", '["s-0"]']) == 2
    assert [(s["sha"], s["state"]) for s in _statuses(fake_github)] == [(HEAD_SHA, "error")]


def test_fork_safe_stage_2_sets_the_status_on_the_tested_commit_not_the_prs_new_head(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 14, case 5: workflow_run.pull_requests is empty for a fork, so stage 2 names
    # the PR with --pr; the PR got a push (HEAD_SHA) after the run tested `tested`.
    tested = "b" * 40
    event = {"workflow_run": {"head_sha": tested, "pull_requests": [], "event": "pull_request"}}
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(event))
    results = _write(tmp_path / "r.json", _test("t::a"), commit=tested)
    assert cli.main(["publish", str(results), "--pr", "7"]) == 0
    assert [s["sha"] for s in _statuses(fake_github)] == [tested]


def test_another_bots_marker_comment_does_not_block_publish(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 14, case 6: publish tried to delete dependabot's comment, got 403, exit 2.
    marked = "<!-- kl-bitexact:bitexact -->\nquoted"
    fake_github.world.add_comment(REPO, 7, marked, "dependabot[bot]")
    results = _write(tmp_path / "r.json", _test("t::a"))
    assert cli.main(["publish", str(results)]) == 0
    assert cli.main(["publish", str(results)]) == 0  # a re-run too
    comments = fake_github.world.repos[REPO].comments
    assert [(c.user, c.body == marked) for c in comments] == [
        ("dependabot[bot]", True),
        ("github-actions[bot]", False),
    ]


def test_expected_shards_a_shard_that_never_reported_fails_the_gate_in_the_comment(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    present = _write(tmp_path / "results-s-0" / "results.json", _test("t::a"))
    assert cli.main(["publish", str(present), "--expected-shards", '["s-0", "s-1"]']) == 2
    (body,) = _comments(fake_github)
    assert "shard s-1 uploaded no results" in body and "this is the runner, not the change" in body
    # Not green, and not the change's failure: the status says error (issue 27).
    assert [s["state"] for s in _statuses(fake_github)] == ["error"]


def test_a_502_then_success_still_publishes_once(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.add_fault(Fault("POST", r"/issues/7/comments$", 502, {"message": "Bad Gateway"}))
    secondary = {"message": "You have exceeded a secondary rate limit.", "documentation_url": ""}
    fake_github.add_fault(Fault("POST", r"/statuses/", 403, secondary, {"Retry-After": "1"}))
    assert cli.main(["publish", str(_write(tmp_path / "r.json", _test("t::a")))]) == 0
    assert len(_comments(fake_github)) == 1
    assert [s["state"] for s in _statuses(fake_github)] == ["success"]
    statuses = [e["status"] for e in fake_github.world.requests if e["method"] == "POST"]
    assert statuses == [502, 201, 403, 201]


def test_a_comment_post_that_takes_effect_but_answers_502_leaves_one_comment(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 14, case 9: a proxy answers 502 after GitHub created the comment, every time.
    # The POST was retried blindly: 4 sticky comments, and publish failed.
    bad_gateway = {"message": "Bad Gateway"}
    ghost = Fault("POST", r"/issues/7/comments$", 502, bad_gateway, times=10, applied=True)
    fake_github.add_fault(ghost)
    assert cli.main(["publish", str(_write(tmp_path / "r.json", _test("t::a")))]) == 0
    assert len(_comments(fake_github)) == 1
    posts = [e for e in fake_github.world.requests if e["path"].endswith("/issues/7/comments")]
    assert [e["method"] for e in posts] == ["GET", "POST", "GET", "GET"]  # look, post, look again
    assert [s["state"] for s in _statuses(fake_github)] == ["success"]


def test_a_comment_post_that_fails_without_effect_is_posted_again_after_a_look(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.add_fault(Fault("POST", r"/issues/7/comments$", 502, {"message": "x"}, times=2))
    assert cli.main(["publish", str(_write(tmp_path / "r.json", _test("t::a")))]) == 0
    assert len(_comments(fake_github)) == 1
    methods = [
        e["method"] for e in fake_github.world.requests if e["path"].endswith("/issues/7/comments")
    ]
    assert methods == ["GET", "POST", "GET", "POST", "GET", "POST", "GET"]


def test_a_missing_pull_request_exits_2_with_a_clear_message(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _write(tmp_path / "r.json", _test("t::a"))
    assert cli.main(["publish", str(results), "--pr", "99"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "kl-bitexact: error: GitHub answered 404 while reading pull request octo/engine#99: "
        "Not Found\n"
    )
    assert "hint: check the repository and number" in err
    assert "Traceback" not in err


def test_no_repository_names_the_option_and_the_variable(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GITHUB_REPOSITORY")
    results = str(_write(tmp_path / "r.json", _test("t::a")))
    assert cli.main(["publish", results, "--pr", "7"]) == 2
    err = capsys.readouterr().err
    assert "pass --repo OWNER/NAME or set GITHUB_REPOSITORY" in err and "None" not in err
    assert cli.main(["publish", results, "--pr", "7", "--repo", REPO]) == 0


def test_publish_help_says_repo_is_where_it_publishes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["publish", "--help"])
    assert "repository to publish to" in " ".join(capsys.readouterr().out.split())


def test_no_pull_request_in_the_event_is_a_config_error(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GITHUB_EVENT_PATH")
    assert cli.main(["publish", str(_write(tmp_path / "r.json", _test("t::a")))]) == 2
    assert "no pull request number" in capsys.readouterr().err


def test_invalid_results_are_refused_before_anything_is_posted(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "r.json"
    bad.write_text('{"schema_version": 1, "suites": "not a list"}')
    assert cli.main(["publish", str(bad)]) == 2
    assert f"{bad}: invalid results" in capsys.readouterr().err
    assert fake_github.world.requests == []


# --- blocked-by: every row of the table -------------------------------------------------


def _vouch(fake_github: FakeGitHub) -> None:
    """A maintainer's label on PR #7: the blocked_by markers it adds (no baseline has them)
    may excuse its red tests (issue 30, item 3)."""
    fake_github.world.label(REPO, 7, LABEL, actor=MAINTAINER)


@pytest.mark.parametrize(
    ("blocker", "red", "options", "code", "phrase"),
    [
        ("open", True, [], 0, "expected red"),
        ("open", False, [], 0, "unexpected green"),
        ("open", False, ["--strict"], 1, "unexpected green"),
        (
            "merged",
            True,
            [],
            1,
            "octo/engine#\u206012](https://redirect.github.com/octo/engine/issues/12) merged "
            "but this test is still red",
        ),
        ("merged", False, [], 0, "remove the `blocked_by` marker"),
        ("closed", True, [], 1, "stale marker"),
        ("closed", False, [], 0, "stale marker"),
        ("unknown", True, [], 1, "unknown"),
        ("unknown", False, [], 1, "unknown"),
        ("unknown", True, ["--allow-unknown-blockers"], 0, "unknown"),
    ],
)
def test_each_row_of_the_blocked_by_table(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    blocker: str,
    red: bool,
    options: list[str],
    code: int,
    phrase: str,
) -> None:
    for spec in BLOCKERS.values():
        fake_github.world.seed({"repos": {REPO: spec}})
    _vouch(fake_github)  # the marker is the PR's own: no baseline has it
    number = {"open": 11, "merged": 12, "closed": 13, "unknown": 404}[blocker]
    results = _write(tmp_path / "r.json", _test("t::ok"), _test("t::blocked", red, (f"#{number}",)))
    states_file = tmp_path / "states.json"
    argv = ["publish", str(results), "--blockers-out", str(states_file), *options]
    assert cli.main(argv) == code
    assert json.loads(states_file.read_text()) == {f"{REPO}#{number}": blocker}
    assert phrase in _comments(fake_github)[0]


def test_issues_resolve_too_and_each_blocker_is_asked_once(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.world.seed(
        {
            "repos": {
                REPO: {
                    "issues": [
                        {"number": 21, "state": "open"},
                        {"number": 22, "state": "closed", "state_reason": "completed"},
                        {"number": 23, "state": "closed", "state_reason": "not_planned"},
                    ]
                }
            }
        }
    )
    tests = [
        _test(f"t::{n}-{copy}", blocked_by=(f"#{n}", f"https://github.com/{REPO}/issues/{n}"))
        for n in (21, 22, 23)
        for copy in range(3)
    ]
    states_file = tmp_path / "states.json"
    results = _write(tmp_path / "r.json", *tests)
    cli.main(["publish", str(results), "--blockers-out", str(states_file)])
    assert json.loads(states_file.read_text()) == {
        f"{REPO}#21": "open",
        f"{REPO}#22": "merged",
        f"{REPO}#23": "closed",
    }
    asked = [e["path"] for e in fake_github.world.requests if "/issues/2" in e["path"]]
    assert sorted(asked) == [f"/repos/{REPO}/issues/{n}" for n in (21, 22, 23)]


def test_given_blocker_states_are_used_without_asking(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _vouch(fake_github)
    states = tmp_path / "states.json"
    states.write_text(json.dumps({f"{REPO}#11": "open"}))
    results = _write(tmp_path / "r.json", _test("t::ok"), _test("t::b", True, ("#11",)))
    assert cli.main(["publish", str(results), "--blockers", str(states)]) == 0
    assert not any("/issues/11" in e["path"] for e in fake_github.world.requests)


def _issue_lookups(fake_github: FakeGitHub) -> list[str]:
    return [
        entry["path"]
        for entry in fake_github.world.requests
        if re.fullmatch(r"/repos/[^/]+/[^/]+/issues/\d+", entry["path"])
    ]


def test_blocker_lookups_are_capped_and_kept_to_this_owners_repositories(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _vouch(fake_github)
    # Issue 14, case 8: 2,500 distinct references across 501 repositories in one results
    # file made 2,500 requests (over 10 minutes at the default pacing).
    own = [f"#{n}" for n in range(1, 131) if n != 7]  # #7, the PR itself, excuses nothing
    owners = ["octo/tools#1", "OCTO/docs#2"]
    foreign = [f"stranger-{n}/repo#1" for n in range(40)]
    refs = own + owners + foreign
    tests = [_test(f"t::{i}", red=True, blocked_by=tuple(refs[i::20])) for i in range(20)]
    states_file = tmp_path / "states.json"
    fake_github.world.seed({"repos": {"OCTO/docs": {}, "octo/tools": {}}})  # public
    argv = ["publish", str(_write(tmp_path / "r.json", *tests)), "--blockers-out", str(states_file)]
    assert cli.main(argv) == 1  # unknown blockers fail closed
    asked = _issue_lookups(fake_github)
    assert len(asked) == 100
    assert not any("stranger-" in path for path in asked)
    assert "/repos/OCTO/docs/issues/2" in asked  # the owner's (names ignore case)
    assert "/repos/octo/tools/issues/1" not in asked  # the owner's too, but past the limit
    states = json.loads(states_file.read_text())
    assert len(states) == len(refs)  # every reference has a state, asked about or not
    assert {states[f"stranger-{n}/repo#1"] for n in range(40)} == {"unknown"}
    body = html.unescape(_comments(fake_github)[0])
    assert "not looked up: stranger-0/repo is outside the repositories" in body
    assert "not looked up: over the limit of 100 lookups per run" in body
    assert "lookup failed: GitHub answered 404 while looking a blocker up: Not Found" in body


def test_more_blocker_repositories_and_lookups_can_be_allowed(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _vouch(fake_github)
    fake_github.world.seed(
        {
            "repos": {
                REPO: {"pulls": [{"number": 11}], "issues": [{"number": 21}]},
                "upstream/engine": {"pulls": [{"number": 3}]},
            }
        }
    )
    blocked = [("#11",), ("#21",), ("upstream/engine#3",)]
    tests = [_test(f"t::{n}", red=True, blocked_by=refs) for n, refs in enumerate(blocked)]
    argv = ["publish", str(_write(tmp_path / "r.json", *tests))]
    assert cli.main(argv) == 1  # upstream is not this owner's: unknown, fails closed
    assert "upstream" not in " ".join(_issue_lookups(fake_github))
    more = [*argv, "--blocker-repo", "upstream/*"]
    fake_github.world.requests.clear()
    assert cli.main([*more, "--max-blocker-lookups", "2"]) == 1  # the third is one too many
    assert _issue_lookups(fake_github) == [f"/repos/{REPO}/issues/{n}" for n in (11, 21)]
    assert cli.main([*more, "--max-blocker-lookups", "3"]) == 0  # every blocker open


def test_a_public_comment_shows_no_private_repositorys_blocker_state(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _vouch(fake_github)
    # Issue 30, item 9: the state of octo/secret#5 (private) showed in octo/engine's public
    # PR comment. Not looked up at all: unknown, with the reason, which fails closed.
    fake_github.world.seed(
        {
            "repos": {
                REPO: {"pulls": [{"number": 11}]},
                "octo/secret": {"private": True, "issues": [{"number": 5}]},
                "octo/tools": {"issues": [{"number": 6}]},
            }
        }
    )
    blocked = [("#11",), ("octo/secret#5",), ("octo/tools#6",)]
    tests = [_test(f"t::{n}", red=True, blocked_by=refs) for n, refs in enumerate(blocked)]
    states_file = tmp_path / "states.json"
    argv = ["publish", str(_write(tmp_path / "r.json", *tests)), "--blockers-out", str(states_file)]
    assert cli.main(argv) == 1
    assert json.loads(states_file.read_text()) == {
        f"{REPO}#11": "open",
        "octo/secret#5": "unknown",
        "octo/tools#6": "open",
    }
    assert "/repos/octo/secret/issues/5" not in _issue_lookups(fake_github)
    body = html.unescape(_comments(fake_github)[0])
    assert "not shown: octo/secret is private and this comment is public" in body
    # A private repository's PR comment is private: the same states are shown there.
    fake_github.world.seed({"repos": {REPO: {"private": True}}})
    assert cli.main(argv) == 0  # every blocker open
    assert json.loads(states_file.read_text())["octo/secret#5"] == "open"


def test_a_pull_request_cannot_excuse_its_own_red_test(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 30, item 3: blocked_by ['#7'] on PR #7's red test (itself, open while under
    # review), or any open issue the PR names, turned the gate green.
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    base = _write(tmp_path / "base.json", _test("t::self"), _test("t::added"), _test("t::known"))
    known = _write(tmp_path / "known-base.json", _test("t::known", blocked_by=("#11",)))
    head = _write(
        tmp_path / "head.json",
        _test("t::self", red=True, blocked_by=("#7",)),
        _test("t::added", red=True, blocked_by=("#11",)),
        _test("t::known"),
    )
    assert cli.main(["publish", str(head), "--baseline", str(base)]) == 1
    body = html.unescape(_comments(fake_github)[0]).replace("\u2060", "")
    assert "blocked_by #7 not taken: it names this pull request itself" in body
    assert "blocked_by #11 not taken: this pull request adds it (the base branch's results" in body
    assert "a maintainer's `kl-bitexact-blocked-ok` label can" in body
    # A marker the base branch has excuses, as before.
    red_known = _write(tmp_path / "k.json", _test("t::known", red=True, blocked_by=("#11",)))
    assert cli.main(["publish", str(red_known), "--baseline", str(known)]) == 0
    # A maintainer's label lets the PR's own marker excuse; the PR itself, never.
    _vouch(fake_github)
    assert cli.main(["publish", str(head), "--baseline", str(base)]) == 1
    body = html.unescape(_comments(fake_github)[0]).replace("\u2060", "")
    assert "blocked_by #7 not taken" in body and "blocked_by #11 not taken" not in body
    added_only = _write(
        tmp_path / "a.json",
        _test("t::self"),
        _test("t::added", red=True, blocked_by=("#11",)),
        _test("t::known"),
    )
    assert cli.main(["publish", str(added_only), "--baseline", str(base)]) == 0


def _events_read(fake_github: FakeGitHub) -> int:
    return sum(e["path"] == f"/repos/{REPO}/issues/7/events" for e in fake_github.world.requests)


def _self_excused(tmp_path: Path) -> list[str]:
    """publish with a red test that PR #7's own marker blocks (no baseline has it)."""
    return ["publish", str(_write(tmp_path / "r.json", _test("t::a", True, ("#11",))))]


def _warning(fake_github: FakeGitHub) -> str:
    return html.unescape(_comments(fake_github)[-1]).replace("\u2060", "")


def test_the_label_vouches_only_when_someone_other_than_the_author_added_it(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # An author with triage or write access labelled their own PR and excused their own
    # regression: the label counted by its presence alone.
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    argv = _self_excused(tmp_path)
    fake_github.world.label(REPO, 7, LABEL, actor="ALICE")  # logins ignore case
    assert cli.main(argv) == 1
    assert (
        "blocked_by #11 not taken: no results of the base branch show it has this marker, and "
        "a pull request cannot excuse its own red test (the `kl-bitexact-blocked-ok` label was "
        "added by the PR's author, ALICE; a maintainer other than the author must add it)"
    ) in _warning(fake_github)
    # The author takes it off, a maintainer puts it back: the label now on the PR is theirs.
    fake_github.world.unlabel(REPO, 7, LABEL, actor=AUTHOR)
    _vouch(fake_github)
    assert cli.main(argv) == 0
    assert "not taken" not in _warning(fake_github)
    # And the other way round: what counts is who added the label that is there now.
    fake_github.world.unlabel(REPO, 7, LABEL, actor=MAINTAINER)
    fake_github.world.label(REPO, 7, LABEL, actor=AUTHOR)
    assert cli.main(argv) == 1
    assert "label was added by the PR's author, alice;" in _warning(fake_github)


def test_a_labeller_is_escaped_in_the_comment(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # A login is text from GitHub (a bot's has brackets, Markdown's link syntax): it goes
    # through the comment's one escaper with the rest of the warning, once.
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    fake_github.world.label(REPO, 7, LABEL, actor="CI[bot]")
    assert cli.main(_self_excused(tmp_path)) == 1
    body = _comments(fake_github)[-1]
    assert "added by a bot, CI&#91;bot&#93;, which acts for whoever asked it" in body
    assert "&amp;" not in body  # not escaped twice


def test_a_label_a_bot_added_vouches_for_nothing(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    """A bot adds a label for whoever asks it (sglang's slash commands label PRs for the
    users its CI_PERMISSIONS.json lists, authors among them): the event names the bot, not
    a maintainer who vouched, so the label counts for nothing; a maintainer's own does."""
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    argv = _self_excused(tmp_path)
    fake_github.world.label(REPO, 7, LABEL, actor="github-actions[bot]")
    assert cli.main(argv) == 1
    assert (
        "(the `kl-bitexact-blocked-ok` label was added by a bot, github-actions[bot], which acts "
        "for whoever asked it (the PR's author, maybe); a maintainer must add it by hand)"
    ) in _warning(fake_github)
    fake_github.world.unlabel(REPO, 7, LABEL, actor=MAINTAINER)
    _vouch(fake_github)
    assert cli.main(argv) == 0


@pytest.mark.parametrize(
    ("status", "times", "reason"),
    [
        (403, 1, "GitHub answered 403 while reading the pull request's events: Forbidden"),
        (404, 1, "GitHub answered 404 while reading the pull request's events: Not Found"),
        (502, 4, "GitHub answered 502 while reading the pull request's events"),  # retried 3x
    ],
)
def test_a_label_whose_labeller_cannot_be_read_vouches_for_nothing(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    status: int,
    times: int,
    reason: str,
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    _vouch(fake_github)
    body = {"message": reason.rsplit(": ", 1)[-1] if ": " in reason else "Bad Gateway"}
    fake_github.add_fault(Fault("GET", r"/issues/7/events$", status, body, times=times))
    assert cli.main(_self_excused(tmp_path)) == 1  # fails closed
    warning = _warning(fake_github)
    assert "(the `kl-bitexact-blocked-ok` label is on it, but who added it could not be " in warning
    assert f"checked ({reason}" in warning
    assert "it counts only when a maintainer other than the PR's author adds it)" in warning


def test_events_of_another_shape_than_githubs_vouch_for_nothing(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    _vouch(fake_github)
    odd = [{"id": 1, "event": "labeled", "label": LABEL, "actor": {"login": MAINTAINER}}]
    fake_github.add_fault(Fault("GET", r"/issues/7/events$", 200, odd))  # label: a string
    assert cli.main(_self_excused(tmp_path)) == 1
    assert (
        "could not be checked (GitHub answered something other than its API describes while "
        "reading the pull request's events (BadAttributeException))"
    ) in _warning(fake_github)


def test_the_events_are_read_only_when_the_label_is_there_and_only_so_far(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    argv = _self_excused(tmp_path)
    assert cli.main(argv) == 1
    assert _events_read(fake_github) == 0  # no label: nothing to ask
    fake_github.world.label(REPO, 7, "other", actor=AUTHOR)
    fake_github.world.label(REPO, 7, "more", actor=AUTHOR)
    _vouch(fake_github)
    assert cli.main(argv) == 0
    assert _events_read(fake_github) == 1  # one page
    monkeypatch.setattr(labeller, "MAX_EVENTS", 2)  # the maintainer's event is the third
    assert cli.main(argv) == 1
    assert "the pull request has more than 2 events, which are not read" in _warning(fake_github)


def test_a_seeded_label_without_an_event_vouches_for_nothing(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 11}]}}})
    fake_github.world.repos[REPO].pulls[7].labels.append(LABEL)  # no event says who
    assert cli.main(_self_excused(tmp_path)) == 1
    assert "could not be checked (no event of the pull request says who added it)" in (
        _warning(fake_github)
    )


# --- the baseline from the base branch's newest successful run --------------------------


def _seed_base_run(fake_github: FakeGitHub, tmp_path: Path, run_id: int, red: bool) -> None:
    base = _write(tmp_path / f"base-{run_id}.json", _test("t::a", red=red), commit="b" * 40)
    fake_github.world.add_run(
        REPO,
        Run(id=run_id, workflow="bitexact.yml", created_at=f"2026-11-0{run_id}T00:00:00Z"),
        {"results.json": base.read_bytes()},
        "kl-bitexact-results",
    )


def test_the_baseline_is_fetched_from_the_newest_successful_base_run(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _seed_base_run(fake_github, tmp_path, 1, red=False)
    _seed_base_run(fake_github, tmp_path, 2, red=True)  # newer: red on base already
    results = _write(tmp_path / "r.json", _test("t::a", red=True))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 0  # red on the base too: not this PR's regression
    assert "still failing (red on base too)" in _comments(fake_github)[0]


def test_no_base_run_is_reported_and_the_gate_fails_closed(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    results = _write(tmp_path / "r.json", _test("t::a", red=True))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 1
    assert (
        f"no successful bitexact.yml run of a push on main in {REPO} has a "
        "kl-bitexact-results artifact" in html.unescape(_comments(fake_github)[0])
    )


def test_a_baseline_artifact_that_is_not_results_is_refused_not_trusted(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.world.add_run(
        REPO,
        Run(id=5, workflow="bitexact.yml"),
        {"results.json": b'{"schema_version": 1}'},
        "kl-bitexact-results",
    )
    results = _write(tmp_path / "r.json", _test("t::a"))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 0
    assert "invalid results" in _comments(fake_github)[0]


def _seed_poisoned_run(fake_github: FakeGitHub, tmp_path: Path, **run: Any) -> None:
    """A newer successful run on a branch named main whose results excuse `t::a`'s red."""
    poison = _write(tmp_path / "poison.json", _test("t::a", red=True), commit="e" * 40)
    fields = {"id": 9, "workflow": "bitexact.yml", "head_sha": "e" * 40, **run}
    fake_github.world.add_run(
        REPO,
        Run(created_at="2026-11-09T00:00:00Z", **fields),
        {"results.json": poison.read_bytes()},
        "kl-bitexact-results",
    )


@pytest.mark.parametrize(
    "run",
    [
        # Issue 14, case 2: a fork PR whose branch is named `main` runs the caller workflow
        # under `pull_request`; by branch name alone it was "the newest run on main".
        {"event": "pull_request", "head_repository": "mallory/engine"},
        {"event": "push", "head_repository": "mallory/engine"},
        {"event": "pull_request_target"},
    ],
)
def test_a_run_that_is_not_the_base_branchs_own_never_becomes_the_baseline(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path, run: dict[str, Any]
) -> None:
    _seed_base_run(fake_github, tmp_path, 1, red=False)
    _seed_poisoned_run(fake_github, tmp_path, **run)
    results = _write(tmp_path / "r.json", _test("t::a", red=True))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 1  # the red is this PR's regression, not excused by the poison
    [body] = _comments(fake_github)
    assert "newly red" in body and "still failing" not in body
    assert "b" * 12 in body and "e" * 12 not in body  # the trusted run's commit is shown
    assert [s["state"] for s in _statuses(fake_github)] == ["failure"]


def test_a_push_run_whose_commit_left_the_branch_is_passed_over_with_the_reason(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # A push whose commit is not on main's history (force-pushed away, or a tag named main).
    _seed_poisoned_run(fake_github, tmp_path, event="push")
    fake_github.world.repos[REPO].branches["main"].remove("e" * 40)
    results = _write(tmp_path / "r.json", _test("t::a", red=True))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 1
    [body] = _comments(fake_github)
    assert "baseline unavailable" in body and "not on main" in body


def test_the_events_a_baseline_may_come_from_are_configurable(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    _seed_poisoned_run(fake_github, tmp_path, event="schedule")
    fake_github.world.repos[REPO].branches["main"] = ["e" * 40]  # a nightly run of main
    results = _write(tmp_path / "r.json", _test("t::a", red=True))
    argv = ["publish", str(results), "--fetch-baseline", "--baseline-workflow", "bitexact.yml"]
    assert cli.main(argv) == 1  # push only, by default
    assert cli.main([*argv, "--baseline-event", "push", "--baseline-event", "schedule"]) == 0
    assert "still failing (red on base too)" in _comments(fake_github)[0]


# --- as a process: racing publishers, and the token never shows -------------------------


def _publish_process(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    # Killed with its group when the session ends, if the test's communicate() never did.
    return process_groups.start(
        [sys.executable, "-m", "kl_bitexact", "publish", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_racing_publish_processes_leave_one_comment(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    fake_github.hold("POST", r"/issues/7/comments$", parties=2, timeout=60)
    first = _write(tmp_path / "a.json", _test("t::a"))
    second = _write(tmp_path / "b.json", _test("t::a"), _test("t::b"))
    racers = [_publish_process(env, str(path)) for path in (first, second)]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], outputs
    assert (
        len(
            [
                e
                for e in fake_github.world.requests
                if e["method"] == "POST" and "/comments" in e["path"]
            ]
        )
        == 2
    )
    assert len(_comments(fake_github)) == 1


def test_the_token_never_appears_in_any_output(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    results = _write(tmp_path / "r.json", _test("t::a"), _test("t::b", True, ("#11",)))
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 502, {"message": "Bad Gateway"}))
    runs = [
        _publish_process(env, str(results), "--annotations"),  # works after a retry
        _publish_process(env, str(results), "--pr", "99"),  # 404
        _publish_process({**env, "GITHUB_TOKEN": TOKEN + "x"}, str(results)),  # 401
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [1, 2, 2]
    seen = json.dumps(outputs) + Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    seen += json.dumps(fake_github.world.snapshot())
    assert TOKEN not in seen
    assert "Bad credentials" in outputs[2][1]


def test_a_refused_comment_still_leaves_the_job_summary(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forbidden = {"message": "Resource not accessible by integration", "documentation_url": ""}
    fake_github.add_fault(Fault("POST", r"/issues/7/comments$", 403, forbidden))
    results = _write(tmp_path / "r.json", _test("t::a"))
    assert cli.main(["publish", str(results)]) == 2
    err = capsys.readouterr().err
    assert "GitHub answered 403 while writing the sticky comment on #7: Resource not" in err
    assert "pull-requests: write" in err
    assert "kl-bitexact: gate passed" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (r"/pulls/7$", "a JSON string, not a pull request"),
        (r"/pulls/7$", [{"number": 7}]),
        (r"/issues/7/comments", "a JSON string, not a list"),
        (r"/issues/7/comments", {"comments": []}),
        (r"/issues/21$", "a JSON string, not an issue"),
        (r"/issues/21$", [1, 2]),
    ],
    ids=[
        "pull-string",
        "pull-list",
        "comments-string",
        "comments-object",
        "issue-string",
        "issue-list",
    ],
)
def test_a_200_of_the_wrong_shape_is_a_clear_error_not_a_crash(
    fake_github: FakeGitHub,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str,
    body: Any,
) -> None:
    fake_github.world.seed({"repos": {REPO: {"issues": [{"number": 21, "state": "open"}]}}})
    fake_github.add_fault(Fault("GET", path, 200, body, times=99))
    results = _write(tmp_path / "r.json", _test("t::a"), _test("t::b", True, ("#21",)))
    code = cli.main(["publish", str(results)])
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    if "issues/21" in path:  # a blocker lookup that fails is `unknown`, not an abort
        assert code == 1
        return
    assert code == 2, err
    # PyGithub itself refuses some shapes (as a 400); the rest are named by `translated`.
    assert err.startswith("kl-bitexact: error: GitHub answered "), err
    assert len(err.strip().splitlines()) <= 2, err  # one line and its hint


def test_a_successful_publish_prints_no_refusal_it_expected(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # GITHUB_TOKEN cannot read GET /user (403): that is how publish tells it posts as
    # github-actions[bot], not a failure; it printed "Request GET /user failed with 403".
    assert fake_github.world.actor.endswith("[bot]")
    results = _write(tmp_path / "r.json", _test("t::a"))
    run = _publish_process(env, str(results))
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert stderr == "", stderr
    assert stdout.startswith("kl-bitexact: comment created"), stdout


# --- the action's publish step: publish in process, its result read as a value ------------


def test_the_action_publishes_in_process_with_the_token_input(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    """The step's own GITHUB_TOKEN is not publish's: the `github-token` input is; the
    comment's URL comes from publish's result (its comment id), the gate's code is the step's."""
    _write(tmp_path / "results" / "results-s-0" / "results.json", _test("t::a", red=True))
    output = tmp_path / "output.txt"
    inputs = {
        "INPUT_COMMAND": "publish",
        "INPUT_RESULTS_DIR": str(tmp_path / "results"),
        "INPUT_GITHUB_TOKEN": TOKEN,
        "INPUT_ARGS": "--fail-on never",
    }
    step = {**env, **inputs, "GITHUB_TOKEN": "the-step-s-own", "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "action"],
        env={**os.environ, **step},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # --fail-on never, from `args`
    [comment] = fake_github.world.repos[REPO].comments
    url = f"https://github.com/{REPO}/pull/7#issuecomment-{comment.id}"
    assert re.search(f"^comment-url<<(\\w+)\n{re.escape(url)}\n\\1$", output.read_text(), re.M)
    assert f"kl-bitexact: comment created (id {comment.id}); status success" in done.stdout
    assert TOKEN not in done.stdout + done.stderr + output.read_text()


def test_a_publish_step_that_fails_keeps_its_outputs_and_says_why_once(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    results = _write(tmp_path / "results" / "results-s-0" / "results.json", _test("t::a"))
    event = tmp_path / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main"}))  # about no pull request
    output = tmp_path / "output.txt"
    step = {
        "INPUT_COMMAND": "publish",
        "INPUT_RESULTS_DIR": str(tmp_path / "results"),
        "INPUT_GITHUB_TOKEN": TOKEN,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_OUTPUT": str(output),
    }
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "action"],
        env={**os.environ, **step},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("no pull request number") == 1
    written = output.read_text()
    assert re.search(r"^conclusion<<(\w+)\nerror\n\1$", written, re.M), written
    assert str(results) in written  # results-path, as far as the step got
    assert fake_github.world.repos[REPO].comments == []


def test_the_pull_request_a_marker_names_never_excuses_its_red_test_whoever_wrote_it(
    fake_github: FakeGitHub, env: dict[str, str], tmp_path: Path
) -> None:
    # Issue 36, item 11: `blocked_by: ['#7']` already on the base branch, and PR #7 (the
    # blocker, the change expected to turn the test green) leaves it red: the marker was
    # dropped and the plain red test, red on base too, was excused by the base: exit 0.
    base = _write(tmp_path / "base.json", _test("t::fix", red=True, blocked_by=("#7",)))
    for kept in (("#7",), ()):  # the PR keeps the marker, or takes it off
        head = _write(tmp_path / "head.json", _test("t::fix", red=True, blocked_by=kept))
        assert cli.main(["publish", str(head), "--baseline", str(base)]) == 1
        body = html.unescape(_comments(fake_github)[0]).replace("\u2060", "")
        assert "this pull request is the blocker" in body
    # Green, it did what its marker promised.
    green = _write(tmp_path / "green.json", _test("t::fix"))
    assert cli.main(["publish", str(green), "--baseline", str(base)]) == 0

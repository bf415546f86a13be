"""Issue 28's scenario through `kl-bitexact publish` and the local GitHub: main's last 20
runs, where a decode cache-hit ratio alternates 16/32 and 32/32 and another test is steady;
a PR on which both fail. The comment calls the first known on main (counts, first commit)
and the second new, and `--fail-on ...,allow-known` lets the known one through while the
new one still gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gh_constants import FAST_ENV, REPO, TOKEN
from history_runs import FLAKY_ID, RUNS, STEADY_ID, commit, main_run, main_run_bytes, pr_run, when
from msgspec import structs

from kl_bitexact import cli
from kl_bitexact.results import io as results_io
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run
from kl_bitexact.untrusted import escape

HEAD_SHA = "e" * 40


@pytest.fixture
def scene(fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Main's 20 runs (their gate failed whenever the hit ratio was 16/32) and PR #7."""
    fake_github.world.seed(
        {"repos": {REPO: {"pulls": [{"number": 7, "head_sha": HEAD_SHA, "base_ref": "main"}]}}}
    )
    for i in range(RUNS):
        run = Run(
            id=700 + i,
            workflow="bitexact.yml",
            head_sha=commit(i),
            created_at=when(i),
            conclusion="failure" if i % 2 else "success",
        )
        files = {"results-shard-0/results.json": main_run_bytes(i)}
        fake_github.world.add_run(REPO, run, files, "kl-bitexact-results")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    env = {
        **FAST_ENV,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKFLOW": "bitexact",
        "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/bitexact.yml@refs/pull/7/merge",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def _publish(scene: Path, head: object, fail_on: str) -> int:
    path = scene / "head.json"
    results_io.write_atomic(head, path)  # type: ignore[arg-type]
    argv = ["publish", str(path), "--fetch-baseline", "--fetch-history", "--fail-on", fail_on]
    return cli.main(argv)


def _comment(fake_github: FakeGitHub) -> str:
    (comment,) = fake_github.world.repos[REPO].comments
    return comment.body


def _line(body: str, test_id: str) -> str:
    """The test's line in the history section (a gating test also has one under the table,
    with its reason and how to run it again)."""
    shown = escape.code(test_id)
    lines = body.splitlines()
    return next(
        line for line in lines if line.startswith("- ") and shown in line and "of main" in line
    )


def test_known_flaky_on_main_and_new_failure(
    fake_github: FakeGitHub, scene: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Strict by default: both gate (the baseline, run 19, happened to be 16/32 too).
    assert _publish(scene, pr_run(HEAD_SHA), "failure") == 1
    body = _comment(fake_github)
    known, new = _line(body, FLAKY_ID), _line(body, STEADY_ID)
    first = escape.code(commit(1)[:7])
    assert f"**known**: failed 10 of the last 20 runs of main, first at {first}" in known
    assert "**new**: never failed in the last 20 runs of main" in new
    assert "2 failing tests" not in body and "gate failed: 2 tests still failing" not in body
    assert "`" + "✓✗" * 10 + "` (oldest → newest)" in body
    stderr = capsys.readouterr().err
    assert "kl-bitexact: history: 20 runs of main: 0 cached, downloading 20" in stderr
    # allow-known: the known flake passes, the new failure still gates.
    assert _publish(scene, pr_run(HEAD_SHA), "failure,allow-known") == 1
    body = _comment(fake_github)
    assert _line(body, FLAKY_ID).endswith(" · let through")
    assert not _line(body, STEADY_ID).endswith(" · let through")
    assert "gate failed: 1 regression" in body and "1 known failure on main let through" in body
    assert "downloading" not in capsys.readouterr().err  # the cache held every run
    # A PR on which only the known flake is red passes under allow-known, not without it
    # (main's numbers, tested on the PR's head: publish marks only the commit tested).
    run = main_run(1)
    only_known = structs.replace(run, run=structs.replace(run.run, commit=HEAD_SHA))
    assert _publish(scene, only_known, "failure,allow-known") == 0
    assert _publish(scene, only_known, "failure") == 1
    statuses = [s["state"] for s in fake_github.world.repos[REPO].statuses]
    assert statuses == ["failure", "failure", "success", "failure"]


def test_publish_refuses_two_sources_of_history(
    scene: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scene / "head.json"
    results_io.write_atomic(pr_run(), path)
    argv = ["publish", str(path), "--fetch-history", "--history-dir", str(scene)]
    assert cli.main(argv) == 2
    assert "--fetch-history and --history-dir both give the history" in capsys.readouterr().err


# --- a push to main: the action's publish step with `comment: false` ----------------------

PUSHED_SHA = "f" * 40


@pytest.fixture
def push(scene: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The reusable workflow's publish step on a push to main: no pull request, so no
    comment; `baseline: fetch` and `history-runs` as the workflow passes them. The pushed
    commit's results: the flaky test red (16/32), as on half of main's runs."""
    event = scene / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main", "after": PUSHED_SHA}))
    run = main_run(1)
    results_io.write_atomic(
        structs.replace(run, run=structs.replace(run.run, commit=PUSHED_SHA)),
        scene / "results" / "results-shard-0" / "results.json",
    )
    step = {
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_REF": "refs/heads/main",
        "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/bitexact.yml@refs/heads/main",
        "RUNNER_TEMP": str(scene / "runner"),
        "GITHUB_STEP_SUMMARY": str(scene / "summary.md"),
        "INPUT_COMMAND": "publish",
        "INPUT_RESULTS_DIR": str(scene / "results"),
        "INPUT_COMMENT": "false",
        "INPUT_BASELINE": "fetch",
        "INPUT_HISTORY_RUNS": str(RUNS),
        "INPUT_FAIL_ON": "failure,allow-known",
        "INPUT_GITHUB_TOKEN": TOKEN,
    }
    for name, value in step.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GITHUB_TOKEN")  # the step's token is the `github-token` input
    (scene / "summary.md").touch()
    return scene


def _archive_downloads(fake_github: FakeGitHub) -> int:
    return sum(1 for entry in fake_github.world.requests if entry["path"].endswith("/zip"))


def test_a_push_to_main_tells_known_failures_from_new_and_fills_the_cache(
    fake_github: FakeGitHub,
    push: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The flaky test failed 10 of main's last 20 runs: known, so allow-known lets it through.
    assert cli.main(["action"]) == 0
    comment = (push / "results" / "comment.md").read_text()
    first = escape.code(commit(1)[:7])
    known = f"**known**: failed 10 of the last 20 runs of main, first at {first}"
    assert known in _line(comment, FLAKY_ID) and _line(comment, FLAKY_ID).endswith("let through")
    assert known in (push / "summary.md").read_text()
    assert "::notice" not in capsys.readouterr().out
    # Read only: no comment, no status; main's runs are in the job's cache, for the workflow
    # to save (actions/cache) and the next pull request to restore.
    assert {entry["method"] for entry in fake_github.world.requests} == {"GET"}
    assert _archive_downloads(fake_github) == RUNS
    cached = push / "runner" / "kl-bitexact-history" / "octo_engine" / "bitexact.yml" / "main"
    assert len(list((cached / "kl-bitexact-results").glob("run-*.json"))) == RUNS
    # The push's own run, done: a pull request's first publish on that cache (RUNNER_TEMP:
    # where the workflow restores it) downloads that run alone.
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(push / "event.json"))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    pushed = Run(id=720, workflow="bitexact.yml", head_sha=PUSHED_SHA, created_at=when(RUNS))
    files = {"results-shard-0/results.json": main_run_bytes(1)}
    fake_github.world.add_run(REPO, pushed, files, "kl-bitexact-results")
    capsys.readouterr()
    assert _publish(push, pr_run(HEAD_SHA), "failure,allow-known") == 1
    assert "history: 20 runs of main: 19 cached, downloading 1 (" in capsys.readouterr().err
    assert _archive_downloads(fake_github) == RUNS + 2  # that run, and the baseline's


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ("no-token", "the step has no `github-token`"),
        ("a-tag", "GITHUB_REF 'refs/tags/v1' names no branch"),
        ("github-refuses", "fetching the history failed: GitHub answered 403 while listing"),
        ("cache-unwritable", "runner/kl-bitexact-history: not a directory, refused"),
    ],
)
def test_a_push_whose_history_cannot_be_had_reports_and_gates_as_before(
    fake_github: FakeGitHub,
    push: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fault: str,
    why: str,
) -> None:
    if fault == "no-token":
        monkeypatch.setenv("INPUT_GITHUB_TOKEN", "")
    elif fault == "a-tag":
        monkeypatch.setenv("GITHUB_REF", "refs/tags/v1")
    elif fault == "github-refuses":
        forbidden = {"message": "Resource not accessible by integration"}
        fake_github.add_fault(Fault("GET", "/runs$", 403, forbidden))
    else:
        (push / "runner").mkdir()
        (push / "runner" / "kl-bitexact-history").write_text("a file where the cache goes")
    # Without the history, the flaky red test is no known failure: it gates, as before.
    assert cli.main(["action"]) == 1
    notice = "::notice title=kl-bitexact::the branch's history was not fetched: "
    said = capsys.readouterr().out
    assert f"{notice}{why}" in said or f"{notice}history cache {push}/{why}" in said
    assert "**known**" not in (push / "results" / "comment.md").read_text()
    assert _archive_downloads(fake_github) == 0

"""Issue 28's scenario through `kl-bitexact publish` and the local GitHub: main's last 20
runs, where a decode cache-hit ratio alternates 16/32 and 32/32 and another test is steady;
a PR on which both fail. The comment calls the first known on main (counts, first commit)
and the second new, and `--fail-on ...,allow-known` lets the known one through while the
new one still gates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from gh_constants import FAST_ENV, REPO, TOKEN
from history_runs import FLAKY_ID, RUNS, STEADY_ID, commit, main_run, main_run_bytes, pr_run, when

from kl_bitexact import cli
from kl_bitexact.results import io as results_io
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Run
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
    shown = escape.code(test_id)
    return next(line for line in body.splitlines() if line.startswith("- ") and shown in line)


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
    only_known = dataclasses.replace(run, run=dataclasses.replace(run.run, commit=HEAD_SHA))
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

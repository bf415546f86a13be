"""Which commit a run tested (the checkout's HEAD, read from .git) and which commit an event
names (issue 30, item 1), against real git repositories."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.results.commit import SUPPORTED_EVENTS, checkout_commit, event_head

IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env={**os.environ, **IDENTITY}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def repository(path: Path) -> tuple[str, str]:
    """A repository with two commits on main; returns (first, second)."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commits = []
    for text in ("one", "two"):
        (path / "f").write_text(text)
        git(path, "add", "f")
        git(path, "commit", "-q", "-m", text)
        commits.append(git(path, "rev-parse", "HEAD"))
    return commits[0], commits[1]


def test_a_branch_a_detached_head_packed_refs_a_subdirectory_and_a_worktree(tmp_path):
    repo = tmp_path / "repo"
    first, second = repository(repo)
    assert checkout_commit(repo) == second
    (repo / "sub" / "deeper").mkdir(parents=True)
    assert checkout_commit(repo / "sub" / "deeper") == second  # found as git finds it
    git(repo, "checkout", "-q", "--detach", first)  # what actions/checkout with ref: does
    assert checkout_commit(repo) == first
    git(repo, "checkout", "-q", "main")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert checkout_commit(repo) == second
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), first)
    assert checkout_commit(tmp_path / "wt") == first
    assert checkout_commit(tmp_path) is None  # no checkout at or above it


def test_a_head_that_resolves_to_no_commit_is_unknown(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")  # no commit yet: HEAD names a missing branch
    assert checkout_commit(repo) is None
    (repo / ".git" / "HEAD").write_text("ref: ../../../etc/passwd\n")
    assert checkout_commit(repo) is None


def test_run_records_the_checked_out_commit_not_githubs_merge_sha(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    # Under pull_request GITHUB_SHA is GitHub's test merge; the run jobs check out the head.
    repo = tmp_path / "repo"
    _, head = repository(repo)
    merge = "f" * 40
    out = tmp_path / "out"
    done = cli(["run", "--out", str(out)], cwd=repo, env={"GITHUB_SHA": merge})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((out / "results.json").read_text())["run"]["commit"] == head
    # Outside any checkout, GITHUB_SHA is all there is to go by.
    done = cli(["run", "--out", str(out)], cwd=tmp_path, env={"GITHUB_SHA": merge})
    assert json.loads((out / "results.json").read_text())["run"]["commit"] == merge


SHA = "a" * 40


@pytest.mark.parametrize(
    ("name", "event", "expected"),
    [
        ("pull_request", {"pull_request": {"head": {"sha": SHA}}}, SHA),
        ("pull_request_target", {"pull_request": {"head": {"sha": SHA}}}, SHA),
        ("workflow_run", {"workflow_run": {"head_sha": SHA}}, SHA),
        ("push", {}, "b" * 40),
        ("merge_group", {}, "b" * 40),
    ],
)
def test_the_commit_each_event_names(name, event, expected):
    assert event_head(name, event, "b" * 40) == expected


@pytest.mark.parametrize("name", ["issue_comment", "release", "check_run", ""])
def test_an_event_that_names_no_commit_is_refused_by_name(name):
    with pytest.raises(ConfigError) as refused:
        event_head(name, {"pull_request": {"head": {"sha": SHA}}}, "b" * 40)
    assert f"the {name or 'unnamed'} event is not one kl-bitexact can test" in refused.value.message
    assert "workflow_run" in refused.value.message
    assert name not in SUPPORTED_EVENTS


def test_an_event_without_its_commit_is_refused():
    with pytest.raises(ConfigError, match=r"workflow_run event has no full commit SHA"):
        event_head("workflow_run", {"workflow_run": {"head_sha": "main"}}, SHA)

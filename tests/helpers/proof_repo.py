"""An engine repository whose PR fixes a bug and adds the test that catches it (issue 19).

`main` (the base): the engine is the reference engine with `checkpoint-off-by-one` (a
recurrent-state checkpoint holding the state one token early), and one suite file with a
`match` test, which cannot see the bug (no cache involved). The PR's head removes the
fault from the engine's launch script (the fix) and adds a `prefill_cache_hit` test,
which resumes from those checkpoints: red on the base revision, green on the head. The
engine is the repository's own script (`engine/serve.sh`), so which revision runs it
decides which engine serves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "extra-a-test-4-gpu-b200"
SUITE_FILE = "test/bitexact/engine.yaml"
NEW_TEST = f"{SUITE}::prefill_cache_hit"
FAULT = "checkpoint-off-by-one"

_TEST = "    - {{name: {name}, check: {name}, samples: 4, prompt_tokens: [48, 96], max_new_tokens: 16, vocab_size: 256}}\n"  # noqa: E501


@dataclass(frozen=True)
class ProofRepo:
    path: Path
    base: str  # main's commit
    head: str  # the PR's commit


def serve_script(*, fault: bool) -> str:
    """The engine's launch script; this interpreter and this tree's kl_bitexact."""
    flags = f" --fault {FAULT}" if fault else ""
    return (
        "#!/bin/sh\n"
        "# The engine under test (a stand-in: kl-bitexact's reference engine).\n"
        f"PYTHONPATH={ROOT / 'src'} exec {sys.executable} -m kl_bitexact serve-reference"
        f' --port "$1" --enable-deterministic-inference{flags}\n'
    )


def suite_file(*tests: str) -> str:
    return (
        "stage: extra-a\n"
        "runner_config: 4-gpu-b200\n"
        "est_time: 30\n"
        "server:\n"
        "  engine: sglang\n"
        '  command: [sh, engine/serve.sh, "{port}"]\n'
        "  startup_timeout: 120\n"
        "tests:\n" + "".join(_TEST.format(name=name) for name in tests)
    )


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


def write(repo: Path, name: str, text: str) -> None:
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def create(path: Path, extra: dict[str, str] | None = None) -> ProofRepo:
    """main with the bug, then the PR's commit on branch `fix` (checked out)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write(path, "engine/serve.sh", serve_script(fault=True))
    write(path, SUITE_FILE, suite_file("match"))
    for name, text in (extra or {}).items():
        write(path, name, text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "engine with a bit-exact suite")
    base = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "fix")
    write(path, "engine/serve.sh", serve_script(fault=False))
    write(path, SUITE_FILE, suite_file("match", "prefill_cache_hit"))
    git(path, "commit", "-q", "-am", "fix the checkpoint position; add the test that catches it")
    return ProofRepo(path, base, git(path, "rev-parse", "HEAD"))


def checkout(repo: ProofRepo, commit: str, target: Path) -> Path:
    """A separate checkout of `commit` (as actions/checkout with `path:` makes one)."""
    git(repo.path, "worktree", "add", "-q", "--detach", str(target), commit)
    return target

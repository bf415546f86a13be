"""A small engine repository in git, for the PR-change reach tests and benchmark: package
`toyengine` (the reference engine under another name, with a few functions of its own) and
a server `python -m toyengine.serve --port P [serve-reference's flags]`. `make(root)` commits
the base, then the head that changes `changed` of its functions (and a test file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENGINE = """
from kl_bitexact.reference.engine import ReferenceEngine

LIMIT = {limit}


class ToyEngine(ReferenceEngine):
    def generate(self, requests, gone=None):
        self.admitted = self.admit(requests)
        return super().generate(requests, gone)

    def admit(self, requests):
        count = len(requests)
        return min(count, LIMIT)

    def flush(self):
        self.cleared = self.clear()
        return super().flush()

    def clear(self):
        return {clear}

    def evict(self, pages):
        freed = pages * {evict}
        return freed
{extra}
"""

SERVE = """
import sys

from kl_bitexact.commands.serve_reference import add_arguments, config_from
from kl_bitexact.reference.http import serve
from toyengine.engine import ToyEngine
import argparse

parser = argparse.ArgumentParser()
add_arguments(parser)
args = parser.parse_args(sys.argv[1:])
serve(ToyEngine(config_from(args)), args.host, args.port)
"""

# Helpers the head adds and never calls: a change of ten functions with `extra_helpers=7`.
HELPER = """

def helper_{n}(value):
    doubled = value * 2
    return doubled + {n}
"""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _write(root: Path, limit: int, clear: int, evict: int, extra: str, test: str) -> None:
    package = root / "toyengine"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "serve.py").write_text(SERVE)
    text = ENGINE.format(limit=limit, clear=clear, evict=evict, extra=extra)
    (package / "engine.py").write_text(text)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_engine.py").write_text(f"def test_it():\n    assert {test}\n")


def make(root: Path, extra_helpers: int = 0) -> str:
    """The repository at `root`, head checked out; returns the base commit."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    _write(root, 64, 0, 1, "", "True")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    base = _git(root, "rev-parse", "HEAD")
    extra = "".join(HELPER.format(n=n) for n in range(extra_helpers))
    # The head changes admit (LIMIT's line is module level), clear, evict, and the test.
    _write(root, 64, 1, 2, extra, "1 == 1")
    (root / "toyengine" / "engine.py").write_text(
        (root / "toyengine" / "engine.py")
        .read_text()
        .replace("return min(count, LIMIT)", "return max(min(count, LIMIT), 0)")
    )
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "head")
    return base


def server_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "toyengine.serve", "--port", "{port}", *flags]

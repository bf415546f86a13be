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


# sglang's shard splits a suite of one backend: the Python file has a suite of its own.
PLUGIN_SUITE = "extra-c-test-4-gpu-b200"
PLUGIN_FILE = "test/registered/test_engine_plugin.py"
PLUGIN_NEW_TEST = f"{PLUGIN_FILE}::test_prefill_cache_hit"
_PLUGIN_TEST = """\
\"\"\"The engine's bit-exact tests as a registered pytest file (kl-bitexact's plugin).\"\"\"

import sys

import pytest


def register_cuda_ci(**registration):
    \"\"\"sglang's registration call: nothing at run time; lint-ci and shard read it.\"\"\"


register_cuda_ci(est_time=30, stage="extra-c", runner_config="4-gpu-b200")

SMALL = {{"samples": 4, "prompt_tokens": [48, 96], "max_new_tokens": 16, "vocab_size": 256}}
pytestmark = pytest.mark.kl_suite(
    {{
        "name": "engine-plugin",
        # the engine of the checkout pytest runs in (the base's in the proof run)
        "server": {{"engine": "sglang", "command": ["sh", "engine/serve.sh", "{{port}}"]}},
        "tests": [{{"name": "match", "check": "match", **SMALL}}],
    }}
)
{tests}

if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
"""
_PLUGIN_CHECK = """

def test_{name}(kl_check):
    kl_check("{name}", **SMALL)
"""


def plugin_test_file(*checks: str) -> str:
    """A registered pytest file of PLUGIN_SUITE, one test per check (kl_check, SMALL prompts)."""
    return _PLUGIN_TEST.format(tests="".join(_PLUGIN_CHECK.format(name=c) for c in checks))


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


def create(
    path: Path, extra: dict[str, str] | None = None, pr_extra: dict[str, str] | None = None
) -> ProofRepo:
    """main with the bug, then the PR's commit on branch `fix` (checked out); `extra`
    files on main, `pr_extra` written (added or changed) by the PR."""
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
    for name, text in (pr_extra or {}).items():
        write(path, name, text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fix the checkpoint position; add the test that catches it")
    return ProofRepo(path, base, git(path, "rev-parse", "HEAD"))


def checkout(repo: ProofRepo, commit: str, target: Path) -> Path:
    """A separate checkout of `commit` (as actions/checkout with `path:` makes one)."""
    git(repo.path, "worktree", "add", "-q", "--detach", str(target), commit)
    return target


# --- the same story with a registered Python test file (sglang's shape) ----------------------
#
# The engine is a package in the repository (`python/toyengine`, as sglang's is
# `python/sglang`) that says how its server runs: on `main` with the checkpoint fault. The
# test file imports it, as sglang's files import `sglang.*`, and starts the reference engine
# through sglang's `popen_launch_server` (the `sglang_wheel` plugin). The PR fixes the
# engine, adds a decode cache-hit test (red on base: proven), changes the match test (green
# on base too: not shown to detect anything) and adds a file that imports what only the head's
# engine has (could not prove).

ENGINE = "python/toyengine/__init__.py"
PY_SUITE = "stage-b-kl-1-gpu"
PY_FILE = "test/registered/kl/test_engine_kl.py"
PY_NEW_FILE = "test/registered/kl/test_paged_kl.py"
PY_CLASS = f"{PY_FILE}::TestEngineKL"
PY_DECODE = f"{PY_CLASS}::test_input_output_logprobs_match_decode_cache_hit"
PY_MATCH = f"{PY_CLASS}::test_input_output_logprobs_match"
PY_PAGED = f"{PY_NEW_FILE}::test_paged_layout"

_PY_TEST = '''\
"""The engine's bit-exact tests, in the shape of sglang's."""

import unittest

from sglang.srt.utils import kill_process_tree
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.kl_test_utils import (
    test_input_output_logprobs_match_decode_cache_hit_helper,
    test_input_output_logprobs_match_helper,
)
from sglang.test.test_utils import (
    DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
    DEFAULT_URL_FOR_TEST,
    CustomTestCase,
    popen_launch_server,
)
from toyengine import SERVER_ARGS

register_cuda_ci(est_time=60, suite="{suite}")

MODEL = "kl-bitexact-reference"
ACC_THRESHOLDS = {{MODEL: {{"kl_div": 1e-6}}}}


class TestEngineKL(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.base_url = DEFAULT_URL_FOR_TEST
        cls.process = popen_launch_server(
            MODEL,
            cls.base_url,
            timeout=DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
            other_args=["--enable-deterministic-inference", *SERVER_ARGS],
        )

    @classmethod
    def tearDownClass(cls):
        kill_process_tree(cls.process.pid)

    def test_input_output_logprobs_match(self):
        test_input_output_logprobs_match_helper(
            self.base_url, ACC_THRESHOLDS, MODEL, max_samples={samples}, max_new_tokens=16
        )
{decode}

if __name__ == "__main__":
    unittest.main()
'''

_PY_DECODE = """
    def test_input_output_logprobs_match_decode_cache_hit(self):
        test_input_output_logprobs_match_decode_cache_hit_helper(
            self.base_url, ACC_THRESHOLDS, MODEL, max_samples=6, max_new_tokens=24
        )
"""

_PY_PAGED = f'''\
from sglang.test.ci.ci_register import register_cuda_ci
from toyengine import PAGE_SIZE

register_cuda_ci(est_time=5, suite="{PY_SUITE}")


def test_paged_layout():
    assert PAGE_SIZE == 16
'''


def py_test_file(*, samples: int, decode: bool) -> str:
    return _PY_TEST.format(suite=PY_SUITE, samples=samples, decode=_PY_DECODE if decode else "")


def create_pytest(path: Path) -> ProofRepo:
    """main with the faulty engine package and one registered test file, then the PR."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write(path, ENGINE, f'SERVER_ARGS = ["--fault", "{FAULT}"]\n')
    write(path, PY_FILE, py_test_file(samples=4, decode=False))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "engine with a bit-exact test file")
    base = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "fix")
    write(path, ENGINE, "SERVER_ARGS = []\nPAGE_SIZE = 16\n")
    write(path, PY_FILE, py_test_file(samples=5, decode=True))
    write(path, PY_NEW_FILE, _PY_PAGED)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fix the checkpoint position; test it")
    return ProofRepo(path, base, git(path, "rev-parse", "HEAD"))

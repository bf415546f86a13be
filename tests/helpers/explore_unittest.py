"""The sglang-style unittest file explore hands back, run as sglang's CI runs its tests:
sglang's own helpers from its wheel, against a server named by KL_BITEXACT_BASE_URL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sglang_wheel


def assert_unittest_fails_only_on(test_file: Path, faulty: str, healthy: str) -> None:
    """The handed-back sglang-style file, run as sglang's CI runs its tests (sglang's own
    helpers from its wheel), against each server by KL_BITEXACT_BASE_URL."""
    failed = run_unittest(test_file, faulty)
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "1 failed" in failed.stdout
    passed = run_unittest(test_file, healthy)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "1 passed" in passed.stdout


def run_unittest(test_file: Path, url: str) -> subprocess.CompletedProcess[str]:
    scratch = test_file.parent / f"unittest-{url.rsplit(':', 1)[1]}"
    env = {**sglang_wheel.child_env(scratch), "KL_BITEXACT_BASE_URL": url}
    command = ["pytest", "--out", str(scratch / "out"), "--", "-p", "sglang_wheel"]
    return subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command, test_file.name],
        cwd=test_file.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

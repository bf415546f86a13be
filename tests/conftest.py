from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import process_groups
import pytest
from hypothesis import HealthCheck, settings

# Before anything imports numpy: the reference engine's tiny matrices run 10x slower when
# OpenBLAS threads contend for the machine's shared cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent

# `--hypothesis-profile=mutation` (benchmarks/mutation.py): the same examples every run, so a
# mutant's verdict does not depend on luck, and no "too slow" health check while mutmut
# traces every line on a busy machine.
settings.register_profile(
    "mutation",
    derandomize=True,
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run_cli(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m kl_bitexact ARGS` as a user would, capturing text output. Its whole
    process group is killed when it returns or times out (a timeout raises
    subprocess.TimeoutExpired, as subprocess.run would)."""
    command = [sys.executable, "-m", "kl_bitexact", *args]
    full_env = {**os.environ, **(env or {})}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with process_groups.group(command, cwd=cwd, env=full_env, text=True, **pipes) as process:
        stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """However the session ends, no process group a test started outlives it."""
    process_groups.kill_all()


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


LISTENING = "kl-bitexact reference server listening on "


class ReferenceServer:
    """A real `kl-bitexact serve-reference` process on a free port."""

    def __init__(self, args: Sequence[str]) -> None:
        # A file, not a pipe: the server logs every request, and a full pipe would block it.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self.process = process_groups.start(
            [sys.executable, "-m", "kl_bitexact", "serve-reference", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith(LISTENING):
            self.stop()
            raise RuntimeError(f"server did not start: {line!r} {self.stderr()}")
        self.url = line[len(LISTENING) :].strip()

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        process_groups.kill_group(self.process.pid)
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


@pytest.fixture
def reference_server() -> Iterator[Callable[..., ReferenceServer]]:
    """Start `serve-reference` processes with the given flags; all are stopped after the test."""
    started: list[ReferenceServer] = []

    def start(*args: str) -> ReferenceServer:
        server = ReferenceServer(args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def sglang_oracle() -> Callable[[str], ModuleType]:
    """`load_sglang_module` of tests/helpers/sglang_wheel.py, the wheel fetched first.

    A failed download is an error of the test, never a skip: CI has network to PyPI, and a
    differential test that did not run must not look like one that passed."""
    from sglang_wheel import install, load_sglang_module

    install()
    return load_sglang_module


# Suites under tests/fixtures/ are inputs that tests run in a subprocess (some fail on
# purpose); the main run must not collect them.
collect_ignore = ["fixtures"]

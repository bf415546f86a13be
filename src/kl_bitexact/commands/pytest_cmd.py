"""`kl-bitexact pytest`: run existing pytest/unittest suites and turn them into results.

pytest runs in a child process (the suites launch servers and may crash or hang); it
writes JUnit XML with every test's captured output, which `junit_results` converts. The
child's console output is shown live and kept in DIR/logs/pytest.log.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kl_bitexact.commands import Command
from kl_bitexact.commands.common import add_common_arguments, import_and_write
from kl_bitexact.errors import ConfigError, FatalError
from kl_bitexact.pytest_plugin.fixtures import LOG_DIR_ENV

# pytest's own exit codes (pytest.ExitCode), named here for the messages.
_PYTEST_USAGE_ERROR = 4
_PYTEST_NO_TESTS = 5
# Options kl-bitexact sets itself; a user's value would silently lose or break the import.
_OWNED_OPTIONS = ("--junitxml", "--junit-xml", "--junitprefix")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "results.json, junit.xml and logs/pytest.log")
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        metavar="-- PYTEST_ARGS",
        help="arguments passed to pytest (test files, -k, -x, ...)",
    )


def run_pytest(args: argparse.Namespace) -> int:
    pytest_args = _user_arguments(args.pytest_args)
    out: Path = args.out
    junit_path, log_path = out / "junit.xml", out / "logs" / "pytest.log"
    junit_path.unlink(missing_ok=True)  # never read a stale file from an earlier run
    returncode = _run_child(pytest_command(pytest_args, junit_path), log_path)
    _check_child(returncode, junit_path, log_path)
    return import_and_write(junit_path, log_path, out / "results.json", args)


def _user_arguments(raw: Sequence[str]) -> list[str]:
    arguments = list(raw[1:] if raw[:1] == ["--"] else raw)
    for argument in arguments:
        if argument.split("=", 1)[0] in _OWNED_OPTIONS:
            raise ConfigError(
                f"pytest argument {argument!r} is set by kl-bitexact pytest itself",
                hint="drop it; the JUnit XML is written to DIR/junit.xml (see --out)",
            )
    return arguments


def pytest_command(pytest_args: Sequence[str], junit_path: Path) -> list[str]:
    """The child's command line: JUnit XML holding every test's output, passing ones too."""
    command = [sys.executable, "-m", "pytest", *pytest_args, f"--junitxml={junit_path}"]
    # What `python3 file.py` runs: no imported test_* helper collected as a test.
    command += ["--kl-own-tests-only"]
    command += ["-o", "junit_logging=all", "-o", "junit_log_passing_tests=true"]
    # xunit1 adds the file attribute, from which node ids are rebuilt without the plugin.
    command += ["-o", "junit_family=xunit1"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        # The entry point is not loaded then; name the plugin explicitly (once only:
        # pytest refuses a plugin registered twice).
        command += ["-p", "kl_bitexact.pytest_plugin"]
    return command


def _run_child(command: Sequence[str], log_path: Path) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        log_path.open("w", encoding="utf-8") as log,
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, LOG_DIR_ENV: str(log_path.parent)},
        ) as child,
    ):
        assert child.stdout is not None  # stdout=PIPE
        try:
            _tee(child.stdout, (sys.stdout, log))
            return child.wait()
        except KeyboardInterrupt as stop:
            # Ctrl-C reached the child too (same process group); a SIGTERM or SIGHUP sent
            # to this process alone is passed on. Either way, let it write its XML.
            signum = getattr(stop, "signum", signal.SIGINT)
            if signum != signal.SIGINT:
                child.send_signal(signum)
            child.wait(timeout=30)
            raise


def _tee(source: IO[str], sinks: Sequence[IO[str]]) -> None:
    for line in source:
        for sink in sinks:
            sink.write(line)
            sink.flush()


def _check_child(returncode: int, junit_path: Path, log_path: Path) -> None:
    if returncode == _PYTEST_USAGE_ERROR:
        raise ConfigError(
            f"pytest stopped with a usage error (exit {returncode}): {_usage_error(log_path)}",
            hint=f"fix the arguments after `--` or the marker named; pytest's output: {log_path}",
        )
    if returncode == _PYTEST_NO_TESTS:
        raise FatalError(
            f"pytest collected no tests (exit {returncode}); its output is in {log_path}",
            hint="pass test files or directories after `--`",
        )
    if not junit_path.exists():
        raise FatalError(
            f"pytest exited with code {returncode} without writing {junit_path}; "
            f"its output is in {log_path}",
            hint="the run crashed or was killed before pytest finished",
        )


def _usage_error(log_path: Path) -> str:
    # pytest prints a bad option as argparse does ("pytest: error: ...") and any other
    # usage error (a bad marker argument) as "ERROR: ...".
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if "pytest: error: " in line:
            return line.split("pytest: error: ", 1)[1]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    return errors[-1] if errors else "see its output"


COMMAND = Command(
    name="pytest",
    summary="run sglang-style pytest/unittest suites and recover their KL metrics",
    description="Run existing bit-exact test files with pytest and convert every test, and the "
    "KL and cache-hit lines it printed, into DIR/results.json. Example:\n"
    "  kl-bitexact pytest --out results -- test/registered/kl/test_swa_kl.py -k decode",
    add_arguments=add_arguments,
    handler=run_pytest,
    clean_environment=True,
)

"""Command-line entry point: a table of subcommands and the one error handler."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from kl_bitexact import __version__, signals
from kl_bitexact.commands import (
    Command,
    action,
    import_junit,
    lint_ci,
    publish,
    pytest_cmd,
    report,
    run,
    serve_reference,
    shard,
)
from kl_bitexact.errors import ExitCode, FatalError, Interrupted

COMMANDS: tuple[Command, ...] = (
    run.COMMAND,
    serve_reference.COMMAND,
    report.COMMAND,
    publish.COMMAND,
    lint_ci.COMMAND,
    shard.COMMAND,
    pytest_cmd.COMMAND,
    import_junit.COMMAND,
    action.COMMAND,
)

ISSUES_URL = "https://github.com/org/kl-bitexact/issues"

EPILOG = """\
exit codes:
  0    the gate passes
  1    the gate fails (KL over threshold, differing logprobs in exact mode,
       too few cache hits, a regression, unexpected green in strict mode)
  2    could not run (bad input, server did not start, GitHub refused,
       or no test executed at all)
  3    internal error in kl-bitexact (a bug; a crash log is written)
  129  hung up (SIGHUP)
  130  interrupted (Ctrl-C, SIGINT)
  143  terminated (SIGTERM, e.g. a cancelled CI job)
       on any of these, launched servers are stopped and what finished is written
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kl-bitexact",
        description="Make bit-exact logprob consistency a merge gate for LLM inference engines.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(sub)
        sub.set_defaults(handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with signals.routed():
            return int(args.handler(args))
    except FatalError as error:
        _print_fatal(error)
        return int(error.exit_code)
    except Interrupted as stop:
        print(f"kl-bitexact: interrupted ({stop.name})", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        print("kl-bitexact: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception as error:
        return _report_bug(error)


def _print_fatal(error: FatalError) -> None:
    print(f"kl-bitexact: error: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"  hint: {error.hint}", file=sys.stderr)


def _report_bug(error: Exception) -> int:
    log = _write_crash_log()
    print(
        f"kl-bitexact: internal error: {type(error).__name__}: {error}\n"
        f"  This is a bug in kl-bitexact {__version__}, not in your setup.\n"
        f"  Please report it at {ISSUES_URL} and attach {log}",
        file=sys.stderr,
    )
    return int(ExitCode.INTERNAL_ERROR)


def _write_crash_log() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    directory = Path(os.environ.get("KL_BITEXACT_LOG_DIR", tempfile.gettempdir()))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kl-bitexact-crash-{stamp}-{os.getpid()}.log"
    header = f"kl-bitexact {__version__} on Python {sys.version.split()[0]}\n\n"
    path.write_text(header + traceback.format_exc(), encoding="utf-8")
    return path

"""Command-line entry point: a table of subcommands and the one error handler."""

from __future__ import annotations

import importlib
import os
import sys

from kl_bitexact import __version__

# `kl-bitexact --version` imports nothing more than this module: not even `typing` (which
# pulls in `re` and `collections`); mypy reads the block below, Python skips it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import NoReturn

    from kl_bitexact.commands import Command
    from kl_bitexact.errors import FatalError


class LazyCommand:
    """A subcommand known by name and summary; its module (and everything that module
    imports: numpy, requests, PyGithub...) loads only when the command is chosen, so
    `--version` and `--help` start at once. tests/test_cli.py checks that each summary is
    its module's."""

    __slots__ = ("module", "name", "summary")

    def __init__(self, name: str, summary: str, module: str) -> None:
        self.name, self.summary, self.module = name, summary, module

    def load(self) -> Command:
        command: Command = importlib.import_module(self.module).COMMAND
        return command


def _lazy(module: str, name: str, summary: str) -> LazyCommand:
    return LazyCommand(name, summary, f"kl_bitexact.commands.{module}")


COMMANDS: tuple[Command | LazyCommand, ...] = (
    _lazy("run", "run", "run bit-exact suites and write results.json"),
    _lazy(
        "serve_reference",
        "serve-reference",
        "serve the embedded reference engine (sglang's /generate protocol)",
    ),
    _lazy(
        "explore",
        "explore",
        "search a server for cache bugs no suite was written for, and hand back the test",
    ),
    _lazy("report", "report", "render results as the PR comment Markdown and decide the gate"),
    _lazy("publish", "publish", "post the sticky PR comment and set the merge gate"),
    _lazy(
        "history",
        "history",
        "every test's numbers across the base branch's recent runs (new or known failures)",
    ),
    _lazy(
        "lint_ci",
        "lint-ci",
        "lint CI registration: every test's suite is allowlisted and dispatched",
    ),
    _lazy(
        "shard",
        "shard",
        "partition a suite's files into balanced shards (GitHub matrix JSON)",
    ),
    _lazy(
        "prove_plan",
        "prove-plan",
        "list the suites whose tests a PR adds or changes (the proof job matrix)",
    ),
    _lazy(
        "pytest_cmd",
        "pytest",
        "run sglang-style pytest/unittest suites and recover their KL metrics",
    ),
    _lazy(
        "import_junit",
        "import-junit",
        "turn JUnit XML (and its console log) from another run into results.json",
    ),
    _lazy(
        "action",
        "action",
        "the GitHub Action's step (reads INPUT_* variables; used by action.yml)",
    ),
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
  141  standard output closed (`kl-bitexact run | head -1`: SIGPIPE)
  143  terminated (SIGTERM, e.g. a cancelled CI job)
       on any of these, launched servers are stopped and what finished
       is written
"""


def _formatter() -> type[argparse.HelpFormatter]:
    """argparse's formatter with descriptions and epilogs wrapped to the terminal line by
    line: their line breaks and indented lists kept (the raw formatter's reason to be),
    but no paragraph left a 150-240 character line (issue 27)."""
    import argparse
    import textwrap

    class Wrapped(argparse.RawDescriptionHelpFormatter):
        def __init__(
            self,
            prog: str,
            indent_increment: int = 2,
            max_help_position: int = 24,
            width: int | None = None,
        ) -> None:
            # argparse's own default width, less shutil (its import loads three compression
            # modules: a twentieth of `report --help`'s CPU).
            width = _terminal_columns() - 2 if width is None else width
            super().__init__(prog, indent_increment, max_help_position, width)

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            lines = []
            for line in text.splitlines():
                lead = indent + line[: len(line) - len(line.lstrip())]
                # A list item ("  name: text") continues under its text, not its name.
                item = line.startswith("  ") and not line.startswith("   ")
                hanging = lead + ("  " if item else "")
                wrapped = textwrap.wrap(
                    line.strip(), width, initial_indent=lead, subsequent_indent=hanging
                )
                lines += wrapped or [""]
            return "\n".join(lines)

    return Wrapped


def _terminal_columns() -> int:
    """The terminal's width as argparse would ask shutil for it: $COLUMNS when it is a
    positive number, else standard output's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    try:
        return (os.get_terminal_size(stdout.fileno()).columns or 80) if stdout else 80
    except (ValueError, OSError):
        return 80


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The whole parser when `chosen` is None; otherwise only the chosen command's
    arguments (the others are listed with their summaries, their modules not loaded)."""
    import argparse

    formatter = _formatter()
    parser = argparse.ArgumentParser(
        prog="kl-bitexact",
        description="Make bit-exact logprob consistency a merge gate for LLM inference engines.",
        epilog=EPILOG,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # A known command chosen: the others' parsers would be built only to go unused (a
    # parser is argparse's costliest object; eleven of them were a sixth of `report
    # --help`'s CPU). None chosen, or a misspelt one: all, for the list and the error.
    known = any(entry.name == chosen for entry in COMMANDS)
    for entry in COMMANDS:
        if chosen is not None and entry.name != chosen:
            if not known:
                subparsers.add_parser(entry.name, help=entry.summary)
            continue
        command = entry.load() if isinstance(entry, LazyCommand) else entry
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.description,
            formatter_class=formatter,
        )
        command.add_arguments(sub)
        sub.set_defaults(handler=command.handler, clean_environment=command.clean_environment)
    return parser


def _chosen(argv: Sequence[str]) -> str:
    """The subcommand named on the command line (its first word: the top level takes only
    --version and --help), or "" when there is none."""
    return argv[0] if argv and not argv[0].startswith("-") else ""


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:  # asked before every deploy and in bug reports: no parser needed
        try:
            print(f"kl-bitexact {__version__}", flush=True)
        except BrokenPipeError:
            return _stdout_closed()
        return 0
    if words[:1] == [VALUES_FLAG]:
        work, clean_environment = _from_values(words)
    else:
        args = _parse(words)
        work, clean_environment = (lambda: int(args.handler(args))), args.clean_environment
    refused = None
    if clean_environment:
        refused = _clean_environment(words, restart=argv is None)
    code = _handle(work) if refused is None else refused
    if argv is None:
        _before_exit()
    return code


# `kl-bitexact --values FILE`: a command's options as a file of typed values, written by the
# action for the child process that runs the PR's code (commands/values_file.py). Hidden:
# not for people, who have the command's options.
VALUES_FLAG = "--values"


def _from_values(words: Sequence[str]) -> tuple[Callable[[], int], bool]:
    """The command a values file names, and its work with the file's options."""
    if len(words) != 2:
        _usage(f"{VALUES_FLAG} takes one file and nothing else")
    from pathlib import Path

    from kl_bitexact.commands import values_file
    from kl_bitexact.errors import FatalError

    path = Path(words[1])
    try:
        values = values_file.read(path)
    except FatalError as error:
        _print_fatal(error)
        raise SystemExit(int(error.exit_code)) from None
    command = _command(values.command)
    if command is None or command.options is None or command.work is None:
        _usage(f"{path}: no command {values.command!r} takes a values file")
    work, options_type = command.work, command.options

    def call() -> int:
        return int(work(values_file.options(path, values, options_type)))

    return call, command.clean_environment


def _command(name: str) -> Command | None:
    for entry in COMMANDS:
        if entry.name == name:
            return entry.load() if isinstance(entry, LazyCommand) else entry
    return None


def _usage(message: str) -> NoReturn:
    print(f"kl-bitexact: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse(words: Sequence[str]) -> argparse.Namespace:
    """argparse's parse, with the closest option named for an unrecognized one: a server
    started with a misspelt flag (`serve-reference --enable-deterministic-inferense`) says
    which flag it meant in its log, where `run` finds it (issue 27)."""
    parser = build_parser(_chosen(words))
    args, unknown = parser.parse_known_args(words)
    if unknown:
        sub = _subparser(parser, getattr(args, "command", None)) or parser
        options = [option for action in sub._actions for option in action.option_strings]
        from kl_bitexact.errors import did_you_mean

        close = did_you_mean(unknown[0].split("=", 1)[0], options)
        sub.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({close})" if close else ""))
    return args


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    return None


def _before_exit() -> None:
    """The process ends next (the console script, `python -m kl_bitexact`): every object
    goes to the cycle collector's permanent generation. Modules are torn down and their
    objects freed by reference counts either way; the collector's passes at exit would only
    walk the tens of thousands of objects the imports made (numpy's, requests', ours), a
    tenth of the CPU of a small `run`. Cyclic garbage left at exit stays unfinalized, which
    Python never promises to finalize anyway. Not in-process (argv given): a caller's own
    objects would never be collected again."""
    import gc

    gc.freeze()


def _clean_environment(words: Sequence[str], *, restart: bool) -> int | None:
    """Before a command that runs the repository's code: warn about credentials within its
    reach (or, under GitHub Actions, refuse to start with one in an ancestor: the exit
    code), and as a process (not a call from Python) restart without its own."""
    from kl_bitexact.errors import FatalError
    from kl_bitexact.run import clean_env

    try:
        clean_env.warn(os.environ)
    except FatalError as error:
        _print_fatal(error)
        return int(error.exit_code)
    if restart:
        clean_env.restart_clean(words, os.environ)
    return None


def _handle(work: Callable[[], int]) -> int:
    """Run the chosen command; every error becomes its exit code, with one message."""
    from kl_bitexact import signals  # threads and signal handlers, for a command only
    from kl_bitexact.errors import ExitCode, FatalError, Interrupted

    try:
        with signals.routed():
            code = work()
            sys.stdout.flush()  # a closed stdout is found here, not at interpreter exit
            return code
    except BrokenPipeError:
        return _stdout_closed()
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


def _stdout_closed() -> int:
    """The reader of standard output went away (`kl-bitexact run | head -1`): stop quietly,
    as a process that SIGPIPE ends would (exit 141), with nothing more written to the pipe.
    `run` has stopped its servers and written what finished on the way here. Standard
    output now points at /dev/null, so the interpreter's last flush finds nothing to fail."""
    import contextlib

    from kl_bitexact.errors import ExitCode

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return int(ExitCode.STDOUT_CLOSED)


def _print_fatal(error: FatalError) -> None:
    print(f"kl-bitexact: error: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"  hint: {error.hint}", file=sys.stderr)


def _report_bug(error: Exception) -> int:
    from kl_bitexact.errors import ExitCode

    log = _write_crash_log()
    print(
        f"kl-bitexact: internal error: {type(error).__name__}: {error}\n"
        f"  This is a bug in kl-bitexact {__version__}, not in your setup.\n"
        f"  Please report it at {ISSUES_URL} and attach {log}",
        file=sys.stderr,
    )
    return int(ExitCode.INTERNAL_ERROR)


def _write_crash_log() -> Path:
    # Imported here: only a crash needs them, and every start-up would pay for them.
    import tempfile
    import traceback
    from datetime import datetime, timezone
    from pathlib import Path

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    directory = Path(os.environ.get("KL_BITEXACT_LOG_DIR", tempfile.gettempdir()))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kl-bitexact-crash-{stamp}-{os.getpid()}.log"
    header = f"kl-bitexact {__version__} on Python {sys.version.split()[0]}\n\n"
    path.write_text(header + traceback.format_exc(), encoding="utf-8")
    return path

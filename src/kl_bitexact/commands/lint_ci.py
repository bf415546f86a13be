"""`kl-bitexact lint-ci`: check that every registered suite really runs in CI."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.handlers import cycle_collector_paused, reads_python
from kl_bitexact.commands.repository import add_repository_arguments
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.registry import config, findings, fix, lint, repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_repository_arguments(parser)
    parser.add_argument(
        "--fix",
        action="store_true",
        help="register missing suites in the allowlist and workflow matrix, where the "
        "workflows show they belong",
    )
    parser.add_argument(
        "--suite",
        metavar="NAME",
        help="with --fix: register only this suite",
    )
    parser.add_argument(
        "--format",
        choices=tuple(findings.RENDERERS),
        default="text",
        help="text (default), json ({'findings': [...]}, for `report --findings`) or github "
        "(workflow-command annotations)",
    )


@dataclass(frozen=True)
class Options:
    """What `lint-ci` was asked (the command line, or the action's inputs)."""

    root: Path
    config: Path | None
    fix: bool
    suite: str | None
    format: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(args.root, args.config, args.fix, args.suite, args.format)


@cycle_collector_paused  # the read's half a million objects are walked again otherwise
@reads_python
def handle(args: argparse.Namespace) -> int:
    options = Options.from_args(args)
    found = lint_ci(options)
    sys.stdout.write(findings.RENDERERS[options.format](found))
    return exit_code(found)


def exit_code(found: list[findings.Finding]) -> int:
    return int(ExitCode.GATE_FAILED if findings.has_errors(found) else ExitCode.GATE_PASSED)


@reads_python
def lint_ci(args: Options) -> list[findings.Finding]:
    """The findings (after `--fix`'s edits, when asked): `kl-bitexact lint-ci`, and the
    action's lint-ci step, in process."""
    settings = config.load(args.root, args.config)
    state = repo.read(args.root, settings)
    if args.suite is not None and not args.fix:
        raise ConfigError("--suite limits --fix; give --fix too")
    if args.fix:
        for change in fix.apply(args.root, state, args.suite):
            print(change, file=sys.stderr)
        state = repo.read(args.root, settings)
    return fix.annotate(lint.lint(state), fix.plan(state))


COMMAND = Command(
    name="lint-ci",
    summary="lint CI registration: every test's suite is allowlisted and dispatched",
    description="Read register_*_ci calls and suite files, allowlists and workflows; report every "
    "suite that would silently never run, and every registration that would break CI. "
    "Exit 1 when error findings remain, 0 when clean, 2 when the input cannot be read.",
    add_arguments=add_arguments,
    handler=handle,
)

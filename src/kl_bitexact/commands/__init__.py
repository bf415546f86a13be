"""One module per subcommand; each exposes COMMAND, registered in cli.COMMANDS.

`report --help` imports this package and the chosen command's module: none of them may
import `dataclasses` (its `inspect` is a fifth of that help's CPU), `pathlib` or `typing`
at run time (issue 40; tests/test_cli.py holds it). A command's frozen `Options` and its
work live in a module of their own (`report_work.py`) that the handler imports.
"""

from __future__ import annotations

# `typing`, `argparse` and `pathlib` only for mypy; mypy reads the block, Python skips it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    Handler = Callable[[argparse.Namespace], int]

# Where `run`, `pytest` and `import-junit` write results.json and the rest, unless told
# (a string: argparse makes it the option's Path; their Options hold `Path(DEFAULT_OUT)`).
DEFAULT_OUT = "kl-bitexact-results"


class Command:
    """A subcommand: its name, help texts, arguments and the function that runs it.

    A plain class with slots (not a dataclass: see the module's docstring)."""

    __slots__ = (
        "add_arguments",
        "clean_environment",
        "description",
        "handler",
        "name",
        "options",
        "summary",
        "work",
    )

    def __init__(
        self,
        name: str,
        summary: str,
        description: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        handler: Handler,
        clean_environment: bool = False,
        options: type | None = None,
        work: Callable[[Any], int] | None = None,
    ) -> None:
        self.name, self.summary, self.description = name, summary, description
        self.add_arguments, self.handler = add_arguments, handler
        # Runs the repository's code (suite servers, pytest suites): started as a process, it
        # restarts without GitHub credentials or action inputs first (run/clean_env.py).
        self.clean_environment = clean_environment
        # A command another process hands its work to (the action's run step): its frozen
        # options dataclass and the work done with one, for `kl-bitexact --values FILE`
        # (commands/values_file.py). `handler` is `work(options.from_args(args))`.
        self.options, self.work = options, work

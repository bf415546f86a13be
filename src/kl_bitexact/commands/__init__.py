"""One module per subcommand; each exposes COMMAND, registered in cli.COMMANDS."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Not `typing` at run time (it costs a `--help` a tenth of its CPU); mypy reads the block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Where `run`, `pytest` and `import-junit` write results.json and the rest, unless told.
DEFAULT_OUT = Path("kl-bitexact-results")

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, help texts, arguments and the function that runs it."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    # Runs the repository's code (suite servers, pytest suites): started as a process, it
    # restarts without GitHub credentials or action inputs first (run/clean_env.py).
    clean_environment: bool = False
    # A command another process hands its work to (the action's run step): its frozen
    # options dataclass and the work done with one, for `kl-bitexact --values FILE`
    # (commands/values_file.py). `handler` is `work(options.from_args(args))`.
    options: type | None = None
    work: Callable[[Any], int] | None = None

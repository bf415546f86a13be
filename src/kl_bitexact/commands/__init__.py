"""One module per subcommand; each exposes COMMAND, registered in cli.COMMANDS."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

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

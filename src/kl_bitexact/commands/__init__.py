"""One module per subcommand; each exposes COMMAND, registered in cli.COMMANDS."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from kl_bitexact.errors import NotAvailableError

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, help texts, arguments and the function that runs it."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler


def not_built_yet(name: str, issue: int) -> Handler:
    """Handler for a contract subcommand whose implementation has not landed."""

    def handler(args: argparse.Namespace) -> int:
        raise NotAvailableError(
            f"`kl-bitexact {name}` is not available yet (tracked in issue #{issue})"
        )

    return handler

"""`--root` and `--config`: the repository arguments of `lint-ci`, `shard` and `prove-plan`.

Their own module, so `lint-ci` and `shard` start without importing what the run and
report commands' arguments need (the compare and render stack).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_repository_arguments(parser: argparse.ArgumentParser) -> None:
    """--root and --config, shared with `shard`."""
    from kl_bitexact.registry import config

    parser.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="repository root (default: current directory)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"registry configuration (default: ROOT/{config.CONFIG_FILE} if present)",
    )

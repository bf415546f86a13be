"""`kl-bitexact shard`: split a suite's files into balanced partitions."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.common import add_repository_arguments
from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import config, durations, repo, shard
from kl_bitexact.registry.model import Registration
from kl_bitexact.results import io as results_io


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", required=True, metavar="NAME", help="suite to partition")
    parser.add_argument(
        "--partitions",
        type=_positive_int,
        metavar="N",
        help="number of shards (default with --timeout: the fewest that fit it)",
    )
    add_repository_arguments(parser)
    parser.add_argument(
        "--durations",
        type=Path,
        nargs="*",
        default=[],
        metavar="RESULTS.json",
        help="results of earlier runs; their measured durations override est_time",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="MIN",
        help="minutes one shard may take: report (and, without --partitions, use) the "
        "number of shards needed",
    )
    parser.add_argument(
        "--hw",
        metavar="BACKEND",
        help="backend (cuda, amd, ...) when the suite name is registered for several",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def handle(args: argparse.Namespace) -> int:
    if args.partitions is None and args.timeout is None:
        raise ConfigError("give --partitions N, or --timeout MIN to derive it")
    state = repo.read(args.root, config.load(args.root, args.config))
    members = _suite_registrations(state.registrations, args.suite, args.hw)
    runs = [results_io.load(path) for path in args.durations]
    units = shard.units(members, durations.measured(runs, members))
    count = args.partitions or _needed(units, args.timeout, args.suite)
    plan = shard.partition(units, min(count, len(units)))
    print(json.dumps(_matrix(plan), separators=(",", ":")))
    _summarize(args, units, plan, count)
    return 0


def _suite_registrations(
    registrations: Sequence[Registration], suite: str, backend: str | None
) -> list[Registration]:
    named = [r for r in registrations if r.suite == suite and r.enabled]
    if backend is not None:
        named = [r for r in named if r.backend == backend]
    if not named:
        known = sorted({r.suite for r in registrations})
        close = difflib.get_close_matches(suite, known, n=1)
        raise ConfigError(
            f"suite {suite!r} has no enabled test file"
            + (f" for backend {backend}" if backend else ""),
            hint=f"did you mean {close[0]!r}?" if close else "run `kl-bitexact lint-ci`",
        )
    backends = sorted({r.backend for r in named})
    if len(backends) > 1:
        raise ConfigError(
            f"suite {suite!r} is registered for several backends ({', '.join(backends)})",
            hint="pass --hw BACKEND to pick one",
        )
    return named


def _needed(units: list[shard.Unit], timeout_min: float, suite: str) -> int:
    needed = shard.shards_needed(units, timeout_min * 60)
    if needed is None:
        longest = max(units, key=lambda unit: unit.seconds)
        raise ConfigError(
            f"suite {suite!r}: {longest.name} alone takes {longest.seconds:.0f} s, over the "
            f"{timeout_min:g}-minute timeout, so no number of shards fits",
            hint="raise --timeout, or split the file",
        )
    return needed


def _matrix(plan: shard.Plan) -> dict[str, list[dict[str, object]]]:
    return {
        "include": [
            {"partition": index, "files": [file for unit in units for file in unit.files]}
            for index, units in enumerate(plan.shards)
        ]
    }


def _summarize(
    args: argparse.Namespace, units: list[shard.Unit], plan: shard.Plan, asked: int
) -> None:
    weights = [unit.seconds for unit in units]
    floor = shard.lower_bound(weights, len(plan.shards))
    lines = [
        f"shard: suite {args.suite}: {len(units)} unit(s) in {len(plan.shards)} shard(s), "
        f"longest shard {plan.makespan:.0f} s (lower bound {floor:.0f} s)"
    ]
    if asked > len(units):
        lines.append(f"shard: only {len(units)} unit(s), so {asked} shards would leave some empty")
    if args.timeout is not None:
        needed = shard.shards_needed(units, args.timeout * 60)
        lines.append(f"shard: {needed} shard(s) needed to finish within {args.timeout:g} min")
    print("\n".join(lines), file=sys.stderr)


COMMAND = Command(
    name="shard",
    summary="partition a suite's files into balanced shards (GitHub matrix JSON)",
    description="Partition a suite's test files into N shards that finish together, and print "
    'the GitHub Actions matrix {"include": [{"partition": 0, "files": [...]}, ...]}. '
    "In-process groups stay together; measured durations override est_time.",
    add_arguments=add_arguments,
    handler=handle,
)

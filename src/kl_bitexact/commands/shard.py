"""`kl-bitexact shard`: split a suite's files into balanced partitions."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.handlers import reads_python
from kl_bitexact.commands.repository import add_repository_arguments
from kl_bitexact.errors import ConfigError, did_you_mean
from kl_bitexact.registry import config, durations, repo, sglang_partition, shard
from kl_bitexact.registry.model import Registration
from kl_bitexact.results import io as results_io
from kl_bitexact.untrusted.jsonfile import read_json


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
        "--shard-timeout",  # the action input's name, so both spellings work everywhere
        dest="timeout",
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
    parser.add_argument(
        "--nightly",
        action="store_true",
        help="plan the files registered with nightly=True (run_suite.py --nightly); "
        "without it, the others, as run_suite.py selects them",
    )
    parser.add_argument(
        "--format",
        choices=("matrix", "sglang"),
        default="matrix",
        help="matrix (default): GitHub matrix JSON with each shard's files; sglang: the "
        "`partitions` entry sglang's stage workflow reads ({suite: {arr, size, max_parallel}}), "
        "with the plan sglang's run_suite.py --auto-partition-* computes from "
        "--partition-model-file",
    )
    parser.add_argument(
        "--partition-model-file",
        type=Path,
        metavar="FILE",
        help="with --format sglang: write (or update) the model file run_suite.py "
        "--partition-model-file reads: est[suite] = seconds per file and group",
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


@dataclass(frozen=True)
class Options:
    """What `shard` was asked (the command line, or the action's inputs)."""

    suite: str
    partitions: int | None
    root: Path
    config: Path | None
    durations: tuple[Path, ...]
    timeout: float | None
    hw: str | None
    nightly: bool
    format: str
    partition_model_file: Path | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            suite=args.suite,
            partitions=args.partitions,
            root=args.root,
            config=args.config,
            durations=tuple(args.durations),
            timeout=args.timeout,
            hw=args.hw,
            nightly=args.nightly,
            format=args.format,
            partition_model_file=args.partition_model_file,
        )


Matrix = dict[str, list[dict[str, object]]]


@dataclass(frozen=True)
class Planned:
    """The GitHub matrix of one suite's shards, and the lines that summarise the plan."""

    matrix: Matrix
    summary: tuple[str, ...]


@reads_python
def handle(args: argparse.Namespace) -> int:
    options = Options.from_args(args)
    if options.format == "sglang":
        return _sglang(options, *_members(options))
    planned = plan(options)
    print(json.dumps(planned.matrix, separators=(",", ":")))
    print("\n".join(planned.summary), file=sys.stderr)
    return 0


@reads_python
def plan(options: Options) -> Planned:
    """The `matrix` format's plan (`kl-bitexact shard`, and the action's shard step)."""
    units = shard.units(*_members(options))
    count = options.partitions
    if count is None:
        assert options.timeout is not None  # _members refused neither being given
        count = _needed(units, options.timeout, options.suite)
    partition = shard.partition(units, min(count, len(units)))
    return Planned(_matrix(partition), _summary(options, units, partition, count))


def _members(options: Options) -> tuple[list[Registration], dict[str, float]]:
    """The suite's files run_suite.py would select, and their measured seconds."""
    if options.partitions is None and options.timeout is None:
        raise ConfigError("give --partitions N, or --timeout MIN to derive it")
    if options.partition_model_file is not None and options.format != "sglang":
        raise ConfigError("--partition-model-file goes with --format sglang")
    state = repo.read(options.root, config.load(options.root, options.config))
    members = _suite_registrations(state.registrations, options.suite, options.hw)
    members = _at_cadence(members, options.suite, options.nightly)
    runs = [results_io.load(path) for path in options.durations]
    return members, durations.measured(runs, members)


def _suite_registrations(
    registrations: Sequence[Registration], suite: str, backend: str | None
) -> list[Registration]:
    named = [r for r in registrations if r.suite == suite and r.enabled]
    if backend is not None:
        named = [r for r in named if r.backend == backend]
    if not named:
        known = sorted({r.suite for r in registrations})
        raise ConfigError(
            f"suite {suite!r} has no enabled test file"
            + (f" for backend {backend}" if backend else ""),
            hint=did_you_mean(suite, known) or "run `kl-bitexact lint-ci`",
        )
    backends = sorted({r.backend for r in named})
    if len(backends) > 1:
        raise ConfigError(
            f"suite {suite!r} is registered for several backends ({', '.join(backends)})",
            hint="pass --hw BACKEND to pick one",
        )
    return named


def _at_cadence(members: list[Registration], suite: str, nightly: bool) -> list[Registration]:
    """The files run_suite.py selects: those whose nightly flag equals --nightly."""
    kept = [r for r in members if r.nightly == nightly]
    dropped = len(members) - len(kept)
    if not kept:
        raise ConfigError(
            f"suite {suite!r} has no enabled file registered with nightly={nightly}",
            hint=f"{'drop' if nightly else 'add'} --nightly, or fix the registrations "
            "(`kl-bitexact lint-ci` reports cadence mismatches)",
        )
    if dropped:
        print(
            f"shard: {dropped} file(s) of {suite} registered with nightly={not nightly} are "
            "not planned: run_suite.py does not select them at this cadence",
            file=sys.stderr,
        )
    return kept


def _sglang(args: Options, members: list[Registration], measured: dict[str, float]) -> int:
    items = sglang_partition.units(members, measured)
    count = args.partitions
    if count is None:
        assert args.timeout is not None  # _members refused neither being given
        count = sglang_partition.needed(items, args.timeout * 60)
        if count is None:
            longest = max(items, key=lambda unit: unit.seconds)
            raise ConfigError(
                f"suite {args.suite!r}: {longest.key} alone takes {longest.seconds:.0f} s, "
                f"over the {args.timeout:g}-minute timeout, so no number of shards fits",
                hint="raise --timeout, or split the file",
            )
    shards = sglang_partition.partition(items, min(count, len(items)))
    entry = sglang_partition.partitions_entry(shards)
    print(json.dumps({args.suite: entry}, separators=(",", ":")))
    if args.partition_model_file is not None:
        _write_model(args.partition_model_file, args.suite, sglang_partition.model_est(items))
    best = shard.partition(
        [shard.Unit(u.key, u.files, u.seconds) for u in items], len(shards)
    ).makespan
    print(
        f"shard: suite {args.suite}: {len(items)} unit(s) in {len(shards)} partition(s) as "
        f"run_suite.py assigns them, longest {sglang_partition.makespan(shards):.0f} s "
        f"(kl-bitexact's own plan would take {best:.0f} s)",
        file=sys.stderr,
    )
    return 0


MAX_MODEL_BYTES = 16 * 1024 * 1024


def _write_model(path: Path, suite: str, est: dict[str, float]) -> None:
    """Set est[suite] in the model file, keeping every other suite's entry."""
    document: dict[str, object] = {}
    if path.exists():
        found = read_json(path, what="partition model file", max_bytes=MAX_MODEL_BYTES)
        if not isinstance(found, dict) or not isinstance(found.get("est", {}), dict):
            raise ConfigError(
                f"{path}: not a partition model file (an object with an `est` object)",
                hint="pass a new path, or the model.json sglang's CI stats publish",
            )
        document = found
    suites = dict(document.get("est") or {})  # type: ignore[call-overload]
    suites[suite] = est
    document["est"] = suites
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)


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


def _matrix(plan: shard.Plan) -> Matrix:
    return {
        "include": [
            {"partition": index, "files": [file for unit in units for file in unit.files]}
            for index, units in enumerate(plan.shards)
        ]
    }


def _summary(
    args: Options, units: list[shard.Unit], plan: shard.Plan, asked: int
) -> tuple[str, ...]:
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
    return tuple(lines)


COMMAND = Command(
    name="shard",
    summary="partition a suite's files into balanced shards (GitHub matrix JSON)",
    description="Partition a suite's test files into N shards that finish together, and print "
    'the GitHub Actions matrix {"include": [{"partition": 0, "files": [...]}, ...]}. '
    "In-process groups stay together; measured durations override est_time.",
    add_arguments=add_arguments,
    handler=handle,
)

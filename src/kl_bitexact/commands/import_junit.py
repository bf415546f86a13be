"""`kl-bitexact import-junit`: results.json from JUnit XML produced elsewhere."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.run import exit_code, run_info
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.ingest import junit
from kl_bitexact.ingest.junit_results import (
    SGLANG_MIN_CACHE_HIT_RATIO,
    Options,
    node_id,
    to_results,
)
from kl_bitexact.ingest.log_split import split_log
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.results.model import Results

MAX_LOG_BYTES = 256 * 1024 * 1024


def add_common_arguments(parser: argparse.ArgumentParser, writes: str) -> None:
    """`--out` and `--min-cache-hit-ratio`, shared with `kl-bitexact pytest`."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kl-bitexact-results"),
        metavar="DIR",
        help=f"where {writes} go (default: %(default)s)",
    )
    parser.add_argument(
        "--min-cache-hit-ratio",
        type=_ratio,
        default=SGLANG_MIN_CACHE_HIT_RATIO,
        metavar="R",
        help="the ratio recorded with recovered cache-hit counts; sglang's helpers assert "
        "hits > R x prompts but never print R (default: %(default)s, their value)",
    )


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("junit_xml", type=Path, metavar="FILE.xml", help="JUnit XML from pytest")
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="the run's console output, for tests whose output the XML does not hold",
    )
    add_common_arguments(parser, "results.json")


def run_import(args: argparse.Namespace) -> int:
    return import_and_write(args.junit_xml, args.log, args.out / "results.json", args)


def import_and_write(
    junit_path: Path, log_path: Path | None, out_path: Path, args: argparse.Namespace
) -> int:
    """Convert, write atomically, print one line per test; exit codes as `run`'s."""
    cases = junit.read(junit_path)
    log = _read_log(log_path) if log_path is not None else None
    log_output = split_log(log, [node_id(case) for case in cases]) if log else None
    options = Options(min_cache_hit_ratio=args.min_cache_hit_ratio, log_output=log_output)
    imported = to_results(cases, run_info(), options)
    results_io.write_atomic(imported, out_path)
    _print_summary(imported, out_path)
    code = exit_code(imported)
    if code is ExitCode.COULD_NOT_RUN:
        print(f"kl-bitexact: no test in {junit_path} ran to a verdict", file=sys.stderr)
    return int(code)


def _read_log(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the log ({error.strerror})") from None
    if size > MAX_LOG_BYTES:
        raise ConfigError(f"{path}: {size} bytes is over the {MAX_LOG_BYTES}-byte limit for logs")
    return path.read_text(encoding="utf-8", errors="replace")


def _print_summary(imported: Results, out_path: Path) -> None:
    for _, test in imported.all_tests():
        print(f"{test.status.value:8} {test.id}{_metrics(test)}")
    print(f"kl-bitexact: wrote {out_path}")


def _metrics(test: results.TestResult) -> str:
    parts = []
    if test.kl_div is not None:
        parts.append(f"kl={test.kl_div:.3g}")
    if test.cache_hits is not None:
        parts.append(f"hits={test.cache_hits.hit}/{test.cache_hits.total}")
    return f"  ({', '.join(parts)})" if parts else ""


COMMAND = Command(
    name="import-junit",
    summary="turn JUnit XML (and its console log) from another run into results.json",
    description="Read JUnit XML written by pytest --junitxml elsewhere, recover the KL and "
    "cache-hit lines sglang's helpers printed (from the XML, or from --log when pytest did not "
    "capture them) and write DIR/results.json.",
    add_arguments=add_arguments,
    handler=run_import,
)

"""What several commands share: argument groups, writing an output file, the JUnit import.

Commands never import each other; what two of them need lives here. What only some of
them need (the JUnit import: defusedxml; the registry configuration: ruamel.yaml) is
imported where it is used, so `report` does not pay for it.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kl_bitexact.action import proof_jobs, shards
from kl_bitexact.compare.gate import FailOnChoice, Policy, parse_fail_on
from kl_bitexact.compare.history import DEFAULT_RUNS as DEFAULT_HISTORY_RUNS
from kl_bitexact.compare.history import FETCH_SECONDS, History
from kl_bitexact.compare.history import MAX_RUNS as MAX_HISTORY_RUNS
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io
from kl_bitexact.results.exit_code import exit_code
from kl_bitexact.results.model import Results, Status, TestResult, current_run_info
from kl_bitexact.untrusted.jsonfile import append_text, read_bounded, replace_text

if TYPE_CHECKING:
    from kl_bitexact.ingest.junit import JUnitCase

T = TypeVar("T")


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """What `report` and `publish` both read and render (results, findings, marker key)."""
    parser.add_argument(
        "results",
        nargs="*",
        type=Path,
        metavar="RESULTS.json",
        help="results of this run (several shards are merged); none at all only with "
        "--expected-shards (every shard missing)",
    )
    parser.add_argument(
        "--expected-shards",
        type=_argument_type(shards.parse_names),
        default=(),
        metavar="JSON",
        help="the shards that must have reported: a JSON list of names or the shard matrix "
        '({"include": [{"name": ...}]}, as `shard` or the action plans it); a shard with no '
        "results-NAME/results.json among RESULTS.json (the run jobs' artifact layout) is "
        "reported as an error test, never ignored (the action's input expected-shards)",
    )
    parser.add_argument(
        "--findings",
        type=Path,
        metavar="FILE",
        help="registration findings from `kl-bitexact lint-ci --format json`",
    )
    parser.add_argument(
        "--proof",
        action="append",
        type=Path,
        metavar="FILE",
        help="results of the proof run (`run --prove-base`: the new and changed tests on the "
        "base revision); each is shown as proven, not shown to detect anything, red on both "
        "or could not prove; repeatable (one file per proof job)",
    )
    parser.add_argument(
        "--expected-proofs",
        type=_argument_type(proof_jobs.parse_matrix),
        default=(),
        metavar="JSON",
        help="the proof jobs that must have reported: prove-plan's matrix; each test of a "
        "job with no NAME/results.json among the --proof files is shown as could not prove "
        "(the action's input expected-proofs)",
    )
    parser.add_argument(
        "--annotations",
        action="store_true",
        help="print workflow-command annotations (::error ...) on standard output first",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("GITHUB_WORKFLOW") or render.DEFAULT_KEY,
        help="key of the hidden comment marker (default: the workflow name, else %(default)s)",
    )


def add_policy_arguments(parser: argparse.ArgumentParser, *, publishes: bool = False) -> None:
    parser.add_argument(
        "--fail-on",
        type=_argument_type(parse_fail_on),
        default=FailOnChoice(),
        metavar="MODE[,flaky][,allow-known]",
        help="what fails the gate: regression, failure or never; add ',flaky' for a test "
        "whose repeats (run --repeat) disagree to gate even when every repeat passed; add "
        "',allow-known' for a red test that already failed or was flaky in the base branch's "
        "recent runs (--history-dir, --fetch-history) not to gate, while a test that never "
        "failed there still does (default: regression)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="an unexpected green test fails the gate"
    )
    parser.add_argument(
        "--proof-strict",
        action="store_true",
        help="with --proof: a new or changed test that is green on the base revision too "
        "fails the gate",
    )
    parser.add_argument(
        "--allow-unknown-blockers",
        action="store_true",
        help="a blocker whose state is unknown does not fail the gate",
    )
    target = (
        "the repository to publish to (its pull request, comment and status), and "
        if publishes
        else ""
    )
    parser.add_argument(
        "--repo",
        default=os.environ.get("GITHUB_REPOSITORY"),
        metavar="OWNER/NAME",
        help=f"{target}the repository of short #N blockers (default: $GITHUB_REPOSITORY)",
    )


def add_history_arguments(parser: argparse.ArgumentParser) -> None:
    """--history-dir and --history-runs: the base branch's recent runs (report, publish,
    history)."""
    parser.add_argument(
        "--history-dir",
        type=Path,
        metavar="DIR",
        help="the base branch's recent runs, offline: one results file per run in DIR "
        "(ordered by their run.started_at; what `kl-bitexact history` caches is such a "
        "directory). Each test that needs attention is then said to be new (never failed "
        "there) or known (failed there), with its trend",
    )
    parser.add_argument(
        "--history-runs",
        type=_argument_type(history_runs),
        default=DEFAULT_HISTORY_RUNS,
        metavar="N",
        help=f"how many of the newest runs the history holds (1 to {MAX_HISTORY_RUNS}; "
        "default: %(default)s)",
    )


def add_history_fetch_arguments(parser: argparse.ArgumentParser) -> None:
    """Where fetched history is kept and how long a fetch may take (publish, history)."""
    parser.add_argument(
        "--history-cache",
        type=Path,
        metavar="DIR",
        help="keep the fetched runs' archives here, so a second fetch (another job on the "
        "same machine, a later publish) downloads only new runs; an archive is reused only "
        "when its SHA-256 is the digest GitHub lists for it (default: in a GitHub Actions "
        "job $RUNNER_TEMP/kl-bitexact-history, else $XDG_CACHE_HOME/kl-bitexact/history or "
        "~/.cache/kl-bitexact/history)",
    )
    parser.add_argument(
        "--history-timeout",
        type=_argument_type(_seconds),
        default=FETCH_SECONDS,
        metavar="SECONDS",
        help="stop downloading after this long and use the runs fetched so far, saying so "
        "(default: %(default)s)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{text!r} is not a positive number of seconds")
    return value


def history_runs(text: str) -> int:
    """`--history-runs N`, 1 to MAX_HISTORY_RUNS; a ValueError says what is accepted."""
    value = int(text) if text.strip().isdigit() else 0
    if not 1 <= value <= MAX_HISTORY_RUNS:
        raise ValueError(f"{text!r} is not a whole number from 1 to {MAX_HISTORY_RUNS}")
    return value


def history_from_dir(directory: Path | None, runs: int) -> History | None:
    """The history `--history-dir` names, or None when none is given."""
    if directory is None:
        return None
    from kl_bitexact.compare import history_dir

    return history_dir.load(directory, runs)


def _argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse` as an argparse type: the ValueError that says what is wrong becomes the
    usage error, worded as it is."""

    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse_argument


def load_results(paths: Sequence[Path], expected_shards: Sequence[str]) -> Results:
    """The results given, merged, plus an `error` stand-in for each expected shard that has
    no file among them: a shard whose job failed or never ran must not pass by absence."""
    missing = shards.missing_shards(paths, expected_shards)
    if not paths and not missing:
        raise ConfigError(
            "no results given",
            hint="pass the RESULTS.json files to read (with --expected-shards, none is "
            "needed when every expected shard is missing)",
        )
    for name in missing:
        print(
            f"kl-bitexact: shard {name}: no {shards.ARTIFACT_PREFIX}{name}/results.json among "
            "the results given; reported as an error",
            file=sys.stderr,
        )
    loaded = [(str(path), results_io.load(path)) for path in paths]
    stand_ins = [
        (f"{shards.ARTIFACT_PREFIX}{name} (missing)", shards.missing_shard_results(name))
        for name in missing
    ]
    return results_io.merge(loaded + stand_ins)


def policy(args: argparse.Namespace) -> Policy:
    """The gate policy from `add_policy_arguments`' options."""
    choice: FailOnChoice = args.fail_on
    return Policy(
        choice.mode,
        args.strict,
        args.allow_unknown_blockers,
        flaky=choice.flaky,
        proof_strict=args.proof_strict,
        allow_known=choice.allow_known,
    )


def load_proof(
    paths: Sequence[Path], expected: Sequence[proof_jobs.ProofJob] = ()
) -> Results | None:
    """The proof runs' results (`--proof`, several files merged) and a stand-in for each
    expected proof job that has no file among them; None when there is neither."""
    missing = proof_jobs.missing(paths, expected)
    for job in missing:
        print(
            f"kl-bitexact: proof job {job.name}: no {job.name}/results.json among the --proof "
            f"files; its {len(job.tests)} test(s) reported as could not prove",
            file=sys.stderr,
        )
    loaded = [(str(path), results_io.load(path)) for path in paths]
    stand_ins = [(f"{job.name} (missing)", proof_jobs.stand_in(job)) for job in missing]
    sources = loaded + stand_ins
    return results_io.merge(sources) if sources else None


def cycle_collector_paused(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A handler that loads, compares and renders results with Python's cycle collector
    paused, as it was before after it.

    Results, deltas and report rows are hundreds of thousands of objects without reference
    cycles, freed by their reference counts; the collector only walks them, again at every
    collection while they grow (after a decode, each later phase pays for the earlier ones':
    a quarter of `report`'s CPU on 20,000 tests). The command ends soon after, so the few
    cycles it leaves (exceptions, an HTTP client's) wait at most until the process exits."""

    @functools.wraps(handler)
    def handle(args: argparse.Namespace) -> int:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return handler(args)
        finally:
            if was_enabled:
                gc.enable()

    return handle


def say_notice(line: str | None) -> None:
    """A line on stderr that says why a command found less to do than asked (no deltas, no
    test to prove): standard output stays the command's product (Markdown, a matrix)."""
    if line:
        print(line, file=sys.stderr)


def write_output(path: Path, text: str, *, append: bool = False) -> None:
    """Write (a new file in the path's place) or append (to a regular file only): never
    through a symlink or into a FIFO a run of PR code left there (issue 14, case 9)."""
    if append:
        append_text(path, text)
    else:
        replace_text(path, text)


def reads_python(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A handler that parses a repository's Python, never runs it: the SyntaxWarnings its
    sources would raise when compiled (an invalid escape, `1if`) are their authors' business,
    not lines in our output (found by tests/test_fuzz.py)."""

    @functools.wraps(handler)
    def handle(args: argparse.Namespace) -> int:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return handler(args)

    return handle


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


MAX_LOG_BYTES = 256 * 1024 * 1024


def add_common_arguments(parser: argparse.ArgumentParser, writes: str) -> None:
    """`--out` and `--min-cache-hit-ratio`, shared with `kl-bitexact pytest`."""
    from kl_bitexact.ingest.junit_results import SGLANG_MIN_CACHE_HIT_RATIO

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


def import_and_write(
    junit_path: Path, log_path: Path | None, out_path: Path, args: argparse.Namespace
) -> int:
    """Convert, write atomically, print one line per test; exit codes as `run`'s."""
    _, imported = import_junit(junit_path, log_path, args.min_cache_hit_ratio)
    write_and_list(imported, out_path)
    code = exit_code(imported)
    if code is ExitCode.COULD_NOT_RUN:
        print(f"kl-bitexact: {_could_not_run(imported, junit_path)}", file=sys.stderr)
    return int(code)


def import_junit(
    junit_path: Path, log_path: Path | None, min_cache_hit_ratio: float
) -> tuple[tuple[JUnitCase, ...], Results]:
    """pytest's JUnit XML (and console log) as results, with the cases they came from."""
    from kl_bitexact.ingest import junit
    from kl_bitexact.ingest.junit_results import Options, node_id, to_results
    from kl_bitexact.ingest.log_split import split_log

    cases = junit.read(junit_path)
    log = _read_log(log_path) if log_path is not None else None
    log_output = split_log(log, [node_id(case) for case in cases]) if log else None
    options = Options(min_cache_hit_ratio=min_cache_hit_ratio, log_output=log_output)
    return cases, to_results(cases, current_run_info(), options)


def write_and_list(results: Results, out_path: Path) -> None:
    """results.json written atomically, and one line per test on stdout."""
    results_io.write_atomic(results, out_path)
    for _, test in results.all_tests():
        print(f"{test.status.value:8} {test.id}{_metrics(test)}")
    print(f"kl-bitexact: wrote {out_path}")


def _could_not_run(imported: Results, junit_path: Path) -> str:
    """Why exit 2: nothing reached a verdict, or some tests errored beside those that did."""
    tests = [test for _, test in imported.all_tests()]
    errored = [test.id for test in tests if test.status is Status.ERROR]
    if any(test.status in (Status.PASSED, Status.FAILED) for test in tests):
        shown = ", ".join(errored[:3]) + (" ..." if len(errored) > 3 else "")
        return f"{len(errored)} test(s) in {junit_path} errored before a verdict: {shown}"
    return f"no test in {junit_path} ran to a verdict"


def _read_log(path: Path) -> str:
    raw = read_bounded(path, what="the log", max_bytes=MAX_LOG_BYTES)
    return raw.decode("utf-8", errors="replace")


def _metrics(test: TestResult) -> str:
    parts = []
    if test.kl_div is not None:
        parts.append(f"kl={test.kl_div:.3g}")
    if test.cache_hits is not None:
        parts.append(f"hits={test.cache_hits.hit}/{test.cache_hits.total}")
    if test.exact is not None:
        parts.append(f"differ={test.exact.mismatched}/{test.exact.tokens}")
    return f"  ({', '.join(parts)})" if parts else ""


def base_checkout(base: Path) -> Path:
    """`--prove-base DIR` (run and pytest): the base revision's checkout, a directory."""
    if not base.is_dir():
        raise ConfigError(
            f"--prove-base {base}: not a directory",
            hint="check out the base revision there (actions/checkout with `path:`)",
        )
    return base

"""The argument groups several commands share, and the parsers of their values.

An option's type is a parser here (`_argument_type`): its ValueError is the usage error,
worded as it is. `policy` turns the policy group's options into the gate's `Policy`.

Building the arguments imports nothing heavy: `report --help` is argparse alone (issue 40:
it imported the whole compare and render stack, ten times `--version`'s CPU; then
`dataclasses` and `pathlib`, a third of what was left). A parser of another package is
imported when an option that needs it is given (`_parser_in`), the gate's types when the
policy is built, pathlib when a path is given (`path`); what the options become is
`comment_inputs.CommentInputs`.
"""

from __future__ import annotations

import argparse
import os
from importlib import import_module

from kl_bitexact.commands import DEFAULT_OUT
from kl_bitexact.compare.history_limits import DEFAULT_RUNS as DEFAULT_HISTORY_RUNS
from kl_bitexact.compare.history_limits import FETCH_SECONDS
from kl_bitexact.compare.history_limits import MAX_RUNS as MAX_HISTORY_RUNS
from kl_bitexact.report.marker import DEFAULT_KEY

# `typing` only for mypy: at run time it is a tenth of `report --help`'s CPU.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, TypeVar

    from kl_bitexact.compare.gate import FailOnChoice, Policy

    T = TypeVar("T")


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """What `report` and `publish` both read and render (results, findings, marker key)."""
    parser.add_argument(
        "results",
        nargs="*",
        type=path,
        metavar="RESULTS.json",
        help="results of this run (several shards are merged); none at all only with "
        "--expected-shards (every shard missing)",
    )
    parser.add_argument(
        "--expected-shards",
        type=_argument_type(_parser_in("kl_bitexact.action.shards", "parse_names")),
        default=(),
        metavar="JSON",
        help="the shards that must have reported: a JSON list of names or the shard matrix "
        '({"include": [{"name": ...}]}, as `shard` or the action plans it); a shard with no '
        "results-NAME/results.json among RESULTS.json (the run jobs' artifact layout) is "
        "reported as an error test, never ignored (the action's input expected-shards)",
    )
    parser.add_argument(
        "--findings",
        type=path,
        metavar="FILE",
        help="registration findings from `kl-bitexact lint-ci --format json`",
    )
    parser.add_argument(
        "--proof",
        action="append",
        type=path,
        metavar="FILE",
        help="results of the proof run (`run --prove-base`: the new and changed tests on the "
        "base revision); each is shown as proven, not shown to detect anything, red on both "
        "or could not prove; repeatable (one file per proof job)",
    )
    parser.add_argument(
        "--expected-proofs",
        type=_argument_type(_parser_in("kl_bitexact.action.proof_jobs", "parse_matrix")),
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
        default=os.environ.get("GITHUB_WORKFLOW") or DEFAULT_KEY,
        help="key of the hidden comment marker (default: the workflow name, else %(default)s)",
    )


def add_policy_arguments(parser: argparse.ArgumentParser, *, publishes: bool = False) -> None:
    parser.add_argument(
        "--fail-on",
        type=_argument_type(_parser_in("kl_bitexact.compare.gate", "parse_fail_on")),
        default=None,  # regression, alone (`policy`)
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
        type=path,
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
        type=path,
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
        help="stop downloading after this long, a download in progress too, and use the runs "
        "fetched so far, saying so (default: %(default)s)",
    )


def path(text: str) -> Path:
    """An option's file or directory, as argparse's `type` (pathlib is imported when a path
    is given: `--help` needs none)."""
    from pathlib import Path

    return Path(text)


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


def _argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse` as an argparse type: the ValueError that says what is wrong becomes the
    usage error, worded as it is."""

    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse_argument


def _parser_in(module: str, name: str) -> Callable[[str], Any]:
    """The parser `name` of `module`, imported when an option's value is first parsed."""

    def parse(text: str) -> Any:
        return getattr(import_module(module), name)(text)

    return parse


def policy(args: argparse.Namespace) -> Policy:
    """The gate policy from `add_policy_arguments`' options."""
    from kl_bitexact.compare.gate import FailOnChoice, Policy

    choice: FailOnChoice = args.fail_on or FailOnChoice()
    return Policy(
        choice.mode,
        args.strict,
        args.allow_unknown_blockers,
        flaky=choice.flaky,
        proof_strict=args.proof_strict,
        allow_known=choice.allow_known,
        unreached=choice.unreached,
    )


def add_common_arguments(parser: argparse.ArgumentParser, writes: str) -> None:
    """`--out` and `--min-cache-hit-ratio`, shared with `kl-bitexact pytest`."""
    from kl_bitexact.ingest.junit_results import SGLANG_MIN_CACHE_HIT_RATIO

    parser.add_argument(
        "--out",
        type=path,
        default=DEFAULT_OUT,
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
    if problem := ratio_problem(value):
        raise argparse.ArgumentTypeError(problem)
    return value


def ratio_problem(value: float) -> str | None:
    """What is wrong with a cache-hit ratio (`--min-cache-hit-ratio`, a values file's
    `min_cache_hit_ratio`): the one rule, None when it is fine."""
    return None if 0 <= value <= 1 else f"{value} is not between 0 and 1"

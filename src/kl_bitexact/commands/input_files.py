"""The files several commands read besides their own: results (shards merged, a missing
shard as an error stand-in), proof runs, the history's directory, the base checkout."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.action import proof_jobs, shards
from kl_bitexact.compare.history import History
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results


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


def history_from_dir(directory: Path | None, runs: int) -> History | None:
    """The history `--history-dir` names, or None when none is given."""
    if directory is None:
        return None
    from kl_bitexact.compare import history_dir

    return history_dir.load(directory, runs)


def base_checkout(base: Path) -> Path:
    """`--prove-base DIR` (run and pytest): the base revision's checkout, a directory."""
    if not base.is_dir():
        raise ConfigError(
            f"--prove-base {base}: not a directory",
            hint="check out the base revision there (actions/checkout with `path:`)",
        )
    return base

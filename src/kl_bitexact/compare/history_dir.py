"""The history from a directory of results files, one per base-branch run (offline).

`--history-dir DIR` reads every `*.json` in DIR (the fetch's cache writes `run-ID.json`
there, the run's commit and time in its `run` fields): each is one run of the base branch,
ordered by `run.started_at`. The files are results files like any other (bounded, validated,
never read through a symlink); one that cannot be read is left out and said so, as a
baseline that cannot be read is: the history informs the comment, it never stops it.
"""

from __future__ import annotations

import re
from pathlib import Path

from kl_bitexact.compare.history import MAX_RUNS, History, Run, build, newest
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results

# More files than this is not a history directory (nor the cache): refused before reading.
MAX_FILES = 4 * MAX_RUNS
BRANCH_REF = "refs/heads/"
_RUN_FILE = re.compile(r"^run-(\d{1,20})\.json$")


def load(directory: Path, runs: int, branch: str | None = None) -> History:
    """The newest `runs` runs of the results files in `directory`; `branch` (for the
    wording) defaults to the one their `run.ref` names."""
    if not directory.is_dir():
        raise ConfigError(
            f"--history-dir {directory}: not a directory",
            hint="pass the directory of the base branch's results files (one per run), or "
            "the cache `kl-bitexact history` fills",
        )
    files = sorted(path for path in directory.iterdir() if path.suffix == ".json")
    if len(files) > MAX_FILES:
        raise ConfigError(
            f"--history-dir {directory}: {len(files)} results files, over the limit of "
            f"{MAX_FILES} (one per run; at most {MAX_RUNS} runs are used)",
            hint="keep only the base branch's recent runs there",
        )
    loaded: list[tuple[Run, Results]] = []
    notes: list[str] = []
    for path in files:
        try:
            results = results_io.load(path)
        except ConfigError as error:
            notes.append(f"{path.name} left out: {error.message}")
            continue
        loaded.append((_run_of(path, results), results))
    if not loaded:
        notes.append(f"no results file in {directory}")
    chosen = newest(loaded, runs)
    return build(branch or _branch_of(chosen), chosen, notes)


def _branch_of(runs: list[tuple[Run, Results]]) -> str:
    refs = {results.run.ref for _, results in runs}
    only = refs.pop() if len(refs) == 1 else None
    if only and only.startswith(BRANCH_REF):
        return only[len(BRANCH_REF) :]
    return "the base branch"


def _run_of(path: Path, results: Results) -> Run:
    match = _RUN_FILE.match(path.name)
    run_id = int(match.group(1)) if match else None
    return Run(results.run.commit, results.run.started_at, run_id, path.name)

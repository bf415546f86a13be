"""The history from a directory of results files, one per base-branch run (offline).

`--history-dir DIR` reads every `*.json` in DIR (the fetch's cache writes `run-ID.json`
there, the run's commit and time in its `run` fields): each is one run of the base branch,
ordered by `run.started_at`. Each file is read as results files are (bounded in size, never
through a symlink, `schema_version` 1), but decoded into a view of the fields the history
uses, each typed and bounded, the rest skipped: twenty runs of 1,000 tests are 17 MB of
JSON, and building every per-sample KL and first divergence of them as the full model is
most of a second that the history never looks at (the fetch validated each artifact in
full before caching it). A file that cannot be read is left out and said so, as a baseline
that cannot be read is: the history informs the comment, it never stops it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypeVar

import msgspec

from kl_bitexact.compare.history import Collector, History, Run, newest
from kl_bitexact.compare.history_limits import MAX_RUNS
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import SCHEMA_VERSION, Status
from kl_bitexact.untrusted.jsonfile import read_bounded

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
    notes: list[str] = []
    chosen = files if len(files) <= runs else _newest(files, runs, notes)
    collector, refs = Collector(), set()
    for path in chosen:  # one run in memory at a time (issue 40)
        try:
            results = read_view(path)
        except ConfigError as error:
            notes.append(f"{path.name} left out: {error.message}")
            continue
        refs.add(results.run.ref)
        collector.add(_run_of(path, results.run), results)
    if not collector:
        notes.append(f"no results file in {directory}")
    return collector.history(branch or _branch_of(refs), runs, notes)


def _newest(files: list[Path], runs: int, notes: list[str]) -> list[Path]:
    """The files of the newest `runs` runs, by the time each records (a first pass that
    decodes only that: more files than runs is a directory of older runs too)."""
    found: list[tuple[Run, Path]] = []
    for path in files:
        try:
            info = _read(path, _RunOnly).run
        except ConfigError as error:
            notes.append(f"{path.name} left out: {error.message}")
            continue
        found.append((_run_of(path, info), path))
    return [path for _, path in newest(found, runs)]


def _branch_of(refs: set[str | None]) -> str:
    only = refs.pop() if len(refs) == 1 else None
    if only and only.startswith(BRANCH_REF):
        return only[len(BRANCH_REF) :]
    return "the base branch"


def _run_of(path: Path, info: _RunInfoView) -> Run:
    match = _RUN_FILE.match(path.name)
    run_id = int(match.group(1)) if match else None
    return Run(info.commit, info.started_at, run_id, path.name)


# --- the view: the fields the history reads, typed and bounded; the rest skipped ----------

_Count = Annotated[int, msgspec.Meta(ge=0)]
_Text = Annotated[str, msgspec.Meta(max_length=4096)]


class _ExactView(msgspec.Struct, frozen=True, gc=False):
    tokens: _Count
    mismatched: _Count


class _HitsView(msgspec.Struct, frozen=True, gc=False):
    hit: _Count
    total: _Count


class _FloorView(msgspec.Struct, frozen=True, gc=False):
    kl: float | None = None


class _TestView(msgspec.Struct, frozen=True, gc=False):
    id: _Text
    status: Status
    kl_div: float | None = None
    exact: _ExactView | None = None
    cache_hits: _HitsView | None = None
    noise_floor: _FloorView | None = None


class _SuiteView(msgspec.Struct, frozen=True, gc=False):
    name: _Text
    tests: tuple[_TestView, ...] = ()


class _RunInfoView(msgspec.Struct, frozen=True, gc=False):
    commit: _Text | None = None
    ref: _Text | None = None
    started_at: _Text | None = None


class RunView(msgspec.Struct, frozen=True, gc=False):
    """One run's results as the history reads them (`history.RunResults`)."""

    schema_version: int
    run: _RunInfoView = _RunInfoView()
    suites: tuple[_SuiteView, ...] = ()

    def all_tests(self) -> Iterator[tuple[_SuiteView, _TestView]]:
        for suite in self.suites:
            for test in suite.tests:
                yield suite, test


class _RunOnly(msgspec.Struct, frozen=True, gc=False):
    schema_version: int
    run: _RunInfoView = _RunInfoView()


def read_view(path: Path) -> RunView:
    """One results file as the history's view; errors name the file."""
    return _read(path, RunView)


_View = TypeVar("_View", RunView, _RunOnly)


def _read(path: Path, kind: type[_View]) -> _View:
    raw = read_bounded(
        path,
        what="results file",
        max_bytes=results_io.MAX_RESULTS_BYTES,
        follow_symlinks=False,
    )
    return decode_view(raw, str(path), kind)


def decode_view(raw: bytes, source: str, kind: type[_View]) -> _View:
    """The bytes of one results file as the history's view (or its run alone); errors name
    `source`."""
    try:
        view = msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as error:
        raise ConfigError(f"{source}: invalid results: {error}") from None
    except (msgspec.DecodeError, RecursionError) as error:
        raise ConfigError(f"{source}: not a results file ({type(error).__name__})") from None
    if view.schema_version != SCHEMA_VERSION:
        raise ConfigError(
            f"{source}: schema_version {view.schema_version} is not supported "
            f"(this kl-bitexact reads schema_version {SCHEMA_VERSION})"
        )
    return view

"""Fetch the history: the results artifacts of the base branch's last N runs, each once.

The runs are chosen by the baseline's own rules (`baseline_fetch.distrust`, `off_branch`:
a push of this repository's code, on the branch, its commit on the branch's history), from
the workflow's completed runs of any conclusion: a run whose gate failed is exactly the
one the history must see. Each archive is bounded as the baseline's is, and all of them
together in bytes and time; a run that cannot be had is passed over and said so.

The cache (`--history-cache DIR`) keeps each run's archive as downloaded (`run-ID.zip`)
and the results decoded from it (`run-ID.json`, the run's commit and time in its `run`
fields: a directory `--history-dir` reads offline). Whatever ran on the machine before
could have written there, so an archive is reused only when its SHA-256 is the `digest`
GitHub lists for the artifact; otherwise it is downloaded again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from github import Github
from github.Artifact import Artifact
from github.WorkflowRun import WorkflowRun

from kl_bitexact.compare import history, history_dir
from kl_bitexact.compare.history import DEFAULT_RUNS, FETCH_SECONDS, MAX_RUNS, History
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish import baseline_fetch
from kl_bitexact.publish.baseline_fetch import Wanted
from kl_bitexact.publish.client import Session
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results

# All archives of one history together, and the time one fetch may take: past either,
# the history is what was fetched so far, and says so.
MAX_TOTAL_BYTES = 512 * 1024 * 1024
# Passed-over runs named in the notes.
MAX_NOTES = 5
_SAFE = re.compile(r"[^\w.-]")


@dataclass(frozen=True)
class Bounds:
    """How much one fetch may take: runs kept, runs looked at, bytes, seconds."""

    runs: int = DEFAULT_RUNS
    max_total_bytes: int = MAX_TOTAL_BYTES
    deadline_s: float = FETCH_SECONDS

    @property
    def scan(self) -> int:
        """Runs listed at most to find `runs` usable ones (others may lack the artifact)."""
        return 2 * self.runs + 10


def default_cache(env: Mapping[str, str] = os.environ) -> Path:
    """In a GitHub Actions job, its temporary directory (the runner empties it per job; the
    reusable workflow keeps it across runs with actions/cache); elsewhere the user's cache."""
    if env.get("RUNNER_TEMP"):
        return Path(env["RUNNER_TEMP"]) / "kl-bitexact-history"
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kl-bitexact" / "history"


def cache_dir(root: Path, wanted: Wanted) -> Path:
    """One directory per repository, workflow, branch and artifact name."""
    parts = (wanted.repository, wanted.workflow, wanted.branch, wanted.artifact)
    return root.joinpath(*(_SAFE.sub("_", part) or "_" for part in parts))


@dataclass
class _Chosen:
    run: WorkflowRun
    artifact: Artifact


@dataclass
class _Search:
    chosen: list[_Chosen] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)


Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"kl-bitexact: history: {line}", file=sys.stderr, flush=True)


def fetch(
    session: Session,
    wanted: Wanted,
    cache_root: Path,
    bounds: Bounds | None = None,
    say: Say = _stderr,
) -> History:
    """The newest `bounds.runs` trusted runs' results, oldest first, with notes on what
    was passed over or left out. Never raises for GitHub or a bad archive: a history
    that cannot be had is an empty one with the reason."""
    bounds = bounds or Bounds()
    if not 0 < bounds.runs <= MAX_RUNS:
        raise ConfigError(f"history of {bounds.runs} runs: it must be 1 to {MAX_RUNS}")
    directory = cache_dir(cache_root, wanted)
    try:
        with session.translated(f"listing the runs of {wanted.workflow} on {wanted.branch}"):
            search = _search(session.client, wanted, bounds)
    except GitHubError as error:
        return History(wanted.branch, notes=(f"fetching the history failed: {error.message}",))
    directory.mkdir(parents=True, exist_ok=True)
    fetcher = _Fetcher(session, directory, bounds, say)
    left_out = fetcher.fetch(search.chosen)
    _prune(directory, {chosen.run.id for chosen in search.chosen})
    notes = _notes(search.passed_over + left_out, wanted, len(search.chosen), bounds)
    return history.build(wanted.branch, fetcher.loaded, notes)


def _search(client: Github, wanted: Wanted, bounds: Bounds) -> _Search:
    repo = client.get_repo(wanted.repository)
    branch = baseline_fetch.BranchHistory(repo, wanted.branch)
    search = _Search()
    for run in islice(baseline_fetch.listed_runs(repo, wanted, "completed"), bounds.scan):
        why = baseline_fetch.distrust(run, wanted)
        artifact = None if why else baseline_fetch.named_artifact(run, wanted.artifact)
        if not why and artifact is None:
            why = f"no {wanted.artifact} artifact (expired, or the run uploaded none)"
        why = why or branch.off_branch(run)
        if why:
            search.passed_over.append(f"run {run.id}: {why}")
            continue
        assert artifact is not None
        search.chosen.append(_Chosen(run, artifact))
        if len(search.chosen) == bounds.runs:
            break
    return search


class _Fetcher:
    """Each chosen run's results into the cache: reused when its archive's digest is
    GitHub's, else downloaded within the bounds, newest first (a deadline keeps the
    newest runs)."""

    def __init__(self, session: Session, directory: Path, bounds: Bounds, say: Say) -> None:
        self.session, self.directory = session, directory
        self.bounds, self.say = bounds, say
        self.started = time.monotonic()
        self.downloaded = 0
        self.loaded: list[tuple[history.Run, Results]] = []
        self.stopped: str | None = None

    def fetch(self, chosen: list[_Chosen]) -> list[str]:
        missing = [item for item in chosen if not self._cached(item)]
        if missing:
            size = sum(item.artifact.size_in_bytes for item in missing)
            self.say(
                f"{len(chosen)} runs of {chosen[0].run.head_branch}: {len(chosen) - len(missing)} "
                f"cached, downloading {len(missing)} ({_mb(size)}; at most "
                f"{_mb(self.bounds.max_total_bytes)} and {self.bounds.deadline_s:g} s)"
            )
        left_out: list[str] = []
        for number, item in enumerate(missing, start=1):
            why = self._limit(item) or self._download(item)
            if why:
                left_out.append(f"run {item.run.id}: {why}")
                self._forget(item.run.id)
            else:
                elapsed = time.monotonic() - self.started
                self.say(
                    f"run {item.run.id} ({number} of {len(missing)}, "
                    f"{_mb(item.artifact.size_in_bytes)}, {elapsed:.1f} s)"
                )
        if missing:
            self.say(f"cached in {self.directory} (--history-dir reads it offline)")
        return left_out

    def _cached(self, item: _Chosen) -> bool:
        """The cached archive is GitHub's (its digest), and its decoded results exist."""
        archive, _ = _paths(self.directory, item.run.id)
        digest = getattr(item.artifact, "digest", None)
        if not digest or archive.is_symlink() or not archive.is_file():
            return False
        if _sha256(archive) != digest:
            return False
        # The archive is GitHub's; the decoded file is rewritten from it (it may not be).
        return self._decode(item, archive) is None

    def _limit(self, item: _Chosen) -> str | None:
        """Why no more runs are downloaded: once a bound is reached, the older runs all
        stay out (the history keeps the newest runs, with no gap)."""
        if self.stopped is None:
            elapsed = time.monotonic() - self.started
            size = item.artifact.size_in_bytes
            if elapsed > self.bounds.deadline_s:
                self.stopped = f"left out: the history's {self.bounds.deadline_s:g} s were spent"
            elif self.downloaded + size > self.bounds.max_total_bytes:
                self.stopped = f"left out: over the history's {_mb(self.bounds.max_total_bytes)}"
        return self.stopped

    def _download(self, item: _Chosen) -> str | None:
        archive, _ = _paths(self.directory, item.run.id)
        name = item.artifact.name
        handle, scratch = tempfile.mkstemp(dir=self.directory, prefix=".download-", suffix=".zip")
        os.close(handle)
        try:
            with self.session.translated(f"downloading artifact {name} of run {item.run.id}"):
                location = baseline_fetch.download_location(self.session.client, item.artifact)
                baseline_fetch.download(location, Path(scratch), name)
            self.downloaded += Path(scratch).stat().st_size
            os.replace(scratch, archive)  # a new file in place of whatever was there
        except (GitHubError, ConfigError) as error:
            return error.message
        finally:
            Path(scratch).unlink(missing_ok=True)
        return self._decode(item, archive)

    def _decode(self, item: _Chosen, archive: Path) -> str | None:
        """The archive's results, with GitHub's commit and time for the run, kept and
        written as run-ID.json (for `--history-dir`)."""
        try:
            results = _as_run(baseline_fetch.load_archive(archive, item.artifact.name), item.run)
        except ConfigError as error:
            return error.message
        _, decoded = _paths(self.directory, item.run.id)
        results_io.write_atomic(results, decoded)
        run = history.Run(
            results.run.commit, results.run.started_at, item.run.id, f"run {item.run.id}"
        )
        self.loaded.append((run, results))
        return None

    def _forget(self, run_id: int) -> None:
        for path in _paths(self.directory, run_id):
            path.unlink(missing_ok=True)


def _as_run(results: Results, run: WorkflowRun) -> Results:
    """The run's identity as GitHub lists it, not as the files inside say."""
    info = dataclasses.replace(
        results.run,
        commit=run.head_sha,
        ref=f"{history_dir.BRANCH_REF}{run.head_branch}",
        started_at=run.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    return dataclasses.replace(results, run=info)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _paths(directory: Path, run_id: int) -> tuple[Path, Path]:
    return directory / f"run-{run_id}.zip", directory / f"run-{run_id}.json"


def _prune(directory: Path, keep: set[int]) -> None:
    """Runs that left the window (and stray downloads) leave the cache: it holds the
    history and nothing else, so `--history-dir` on it reads exactly these runs."""
    wanted = {path.name for run_id in keep for path in _paths(directory, run_id)}
    for path in _entries(directory):
        if path.name not in wanted and (path.is_file() or path.is_symlink()):
            path.unlink(missing_ok=True)


def _entries(directory: Path) -> Iterator[Path]:
    yield from (p for p in directory.iterdir() if p.suffix in (".zip", ".json"))


def _notes(passed_over: list[str], wanted: Wanted, chosen: int, bounds: Bounds) -> tuple[str, ...]:
    notes: list[str] = []
    if chosen < bounds.runs:
        events = " or ".join(wanted.events)
        notes.append(
            f"only {chosen} of the {bounds.runs} runs asked for: {wanted.workflow} runs of a "
            f"{events} on {wanted.branch} in {wanted.repository} with a {wanted.artifact} "
            f"artifact, among the newest {bounds.scan}"
        )
    shown = passed_over[:MAX_NOTES]
    if shown:
        more = len(passed_over) - MAX_NOTES
        notes.append("passed over: " + "; ".join(shown) + (f"; {more} more" if more > 0 else ""))
    return tuple(notes)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"

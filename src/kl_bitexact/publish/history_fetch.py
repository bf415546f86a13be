"""Fetch the history: the results artifacts of the base branch's last N runs, each once.

The runs are chosen by the baseline's own rules (`baseline_fetch.distrust`, `off_branch`:
a push of this repository's code, on the branch, its commit on the branch's history), from
the workflow's completed runs of any conclusion: a run whose gate failed is exactly the
one the history must see. Each archive is bounded as the baseline's is, and all of them
together in bytes and time; a run that cannot be had is passed over and said so. The time
holds inside a download too (`blob`): one still going when the deadline passes stops there,
its scratch file removed, and the history ends as at a deadline between downloads.

The cache (`--history-cache DIR`) keeps each run's archive as downloaded (`run-ID.zip`)
and the results decoded from it (`run-ID.json`, the run's commit and time in its `run`
fields: a directory `--history-dir` reads offline). Whatever ran on the machine before
could have written there, so an archive is reused only when its SHA-256 is the `digest`
GitHub lists for the artifact; otherwise it is downloaded again.

A hit costs a read (issue 40): an archive is validated in full and decoded once, when it is
downloaded; later fetches check its digest and read the fields the history uses straight
from its members (`history_dir`'s view), rewriting nothing. The cache is a directory
kl-bitexact owns (issue 36): a symbolic link as its root or any directory below is refused
by name; the manifest (`MANIFEST`) lists the runs whose files kl-bitexact wrote there (and
the digest it verified), and only those are ever replaced or deleted; anything else where a
run's file goes (a directory, a link, a file of unknown origin) leaves that run out, said.

A download goes to a scratch file (`.download-*.zip`) that its writer locks for as long as it
exists, and renames into place; a process killed mid-download (SIGKILL skips the cleanup)
leaves its scratch file, which the next fetch removes once no writer holds it (`_prune_scratch`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from msgspec import structs

from kl_bitexact.compare import history, history_dir
from kl_bitexact.compare.history import Collector, History
from kl_bitexact.compare.history_limits import DEFAULT_RUNS, FETCH_SECONDS, MAX_RUNS
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish import baseline_fetch, history_listing
from kl_bitexact.publish.baseline_fetch import DeadlineSpent, Wanted
from kl_bitexact.publish.client import Session
from kl_bitexact.publish.history_listing import Chosen, ListedRun
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results
from kl_bitexact.untrusted.jsonfile import read_bounded, replace_text

# All archives of one history together, and the time one fetch may take: past either,
# the history is what was fetched so far, and says so.
MAX_TOTAL_BYTES = 512 * 1024 * 1024
# Passed-over runs named in the notes.
MAX_NOTES = 5
_SAFE = re.compile(r"[^\w.-]")
# In each cache directory: the runs whose files kl-bitexact wrote there (not *.json: the
# directory is also a `--history-dir`).
MANIFEST = "kl-bitexact-cache.manifest"
MAX_MANIFEST_BYTES = 1 << 20
# A download's scratch file, as `_scratch` names it.
SCRATCH_PREFIX = ".download-"
_SCRATCH = re.compile(r"\.download-\w{1,32}\.zip")
# Liveness is the writer's lock, not the file's age: a download ends by its history's
# deadline, but that is its writer's own `--history-timeout`, which this fetch cannot know
# (and writers from before the deadline held inside a download had no bound in total
# time), so a live download's file can be older than anything this fetch assumes.
# The age only covers what a lock cannot: the instant between creating the file and locking
# it, and writers from before the lock (kl-bitexact up to ee9ce4d), which hold none but write
# a chunk at a time: a file changed within a whole history's time is left alone.
SCRATCH_GRACE_S = FETCH_SECONDS
# The work one fetch spends on leftovers: directory entries looked at, files removed (each
# killed process leaves one, so later fetches finish what one leaves).
MAX_SCRATCH_ENTRIES = 10_000
MAX_SCRATCH_PRUNED = 100


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
            search = history_listing.search(session.rest, wanted, bounds.runs, bounds.scan)
    except GitHubError as error:
        return History(wanted.branch, notes=(f"fetching the history failed: {error.message}",))
    refused = _own(cache_root, directory)
    if refused:
        return History(wanted.branch, notes=(refused,))
    fetcher = _Fetcher(session, directory, bounds, say)
    fetcher.prune_scratch()
    left_out = fetcher.fetch(search.chosen)
    fetcher.prune({chosen.run.id for chosen in search.chosen})
    notes = _notes(search.passed_over + left_out, wanted, len(search.chosen), bounds)
    return fetcher.collector.history(wanted.branch, notes=[*fetcher.manifest.notes, *notes])


def _own(root: Path, directory: Path) -> str | None:
    """Why the cache cannot be used, or None once `directory` exists under `root` with no
    symbolic link from `root` down (a link would have archives written, and files pruned,
    wherever it points: issue 36). Above `root` links are the system's (/tmp on macOS)."""
    path, below = root, directory.relative_to(root).parts
    for step in (None, *below):
        path = path if step is None else path / step
        if path.is_symlink():
            return (
                f"history cache {path}: a symbolic link, refused (the cache is a directory "
                "kl-bitexact owns: remove the link, or pass another --history-cache)"
            )
        if not path.exists():
            path.mkdir(parents=step is None)
        elif not path.is_dir():
            return f"history cache {path}: not a directory, refused"
    return None


class _Fetcher:
    """Each chosen run's results into the cache: reused when its archive's digest is
    GitHub's, else downloaded within the bounds, newest first (a deadline keeps the
    newest runs). Each run goes into the history as it is read (`Collector`)."""

    def __init__(self, session: Session, directory: Path, bounds: Bounds, say: Say) -> None:
        self.session, self.directory = session, directory
        self.bounds, self.say = bounds, say
        self.started = time.monotonic()
        # The history's deadline holds inside a download too (`blob`: each read waits at
        # most what is left, a read still blocked at the deadline is cut).
        self.deadline = self.started + bounds.deadline_s
        self.downloaded = 0
        self.collector = Collector()
        self.manifest = _Manifest.read(directory)
        self.stopped: str | None = None

    def fetch(self, chosen: list[Chosen]) -> list[str]:
        left_out: list[str] = []
        missing = []
        for item in chosen:
            why = self._foreign(item)
            if why:
                left_out.append(f"run {item.run.id}: {why}")
            elif not self._cached(item):
                missing.append(item)
        if missing:
            size = sum(item.artifact.size_in_bytes for item in missing)
            self.say(
                f"{len(chosen)} runs of {chosen[0].run.head_branch}: {len(chosen) - len(missing)} "
                f"cached, downloading {len(missing)} ({_mb(size)}; at most "
                f"{_mb(self.bounds.max_total_bytes)} and {self.bounds.deadline_s:g} s)"
            )
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

    def _foreign(self, item: Chosen) -> str | None:
        """Why the cache cannot take this run: something where its files go that is not a
        file kl-bitexact wrote (left where it is, never followed, replaced or deleted)."""
        ours = item.run.id in self.manifest.runs
        for path in _paths(self.directory, item.run.id):
            if path.is_symlink() or (path.exists() and not path.is_file()):
                return f"{path.name} in the cache is not a file (left alone; run left out)"
            if path.exists() and not ours and not self._adoptable(item, path):
                return (
                    f"{path.name} in the cache was not written by kl-bitexact and is not "
                    "GitHub's archive of the run (left alone; run left out)"
                )
        return None

    def _adoptable(self, item: Chosen, path: Path) -> bool:
        """A file kl-bitexact's earlier versions wrote (no manifest yet): the run's archive
        as GitHub lists it, or the results decoded beside such an archive."""
        return self._githubs(item)

    def _githubs(self, item: Chosen) -> bool:
        """The cached archive hashes to the digest GitHub lists for the artifact. One that
        cannot be read is not: it is downloaded again, never read as a run without tests."""
        archive, _ = _paths(self.directory, item.run.id)
        digest = item.artifact.digest
        try:
            return bool(digest) and archive.is_file() and _sha256(archive) == digest
        except OSError:
            return False

    def _cached(self, item: Chosen) -> bool:
        """The cached archive is GitHub's (its digest): read, once verified; verified and
        decoded now if it never was (or its decoded file is gone). Anything else, or a read
        that fails, is a miss: the run is downloaded again."""
        archive, decoded = _paths(self.directory, item.run.id)
        if not self._githubs(item):
            return False
        if self.manifest.runs.get(item.run.id) == item.artifact.digest and decoded.is_file():
            return self._read(item, archive) is None
        return self._decode(item, archive) is None

    def _read(self, item: Chosen, archive: Path) -> str | None:
        """A verified archive's tests, as the history reads them: its members' fields the
        history uses, decoded from memory (no model built, nothing written)."""
        try:
            members = baseline_fetch.archive_members(archive, item.artifact.name)
            views = [
                history_dir.decode_view(raw, name, history_dir.RunView) for name, raw in members
            ]
        except ConfigError as error:
            return error.message
        except OSError as error:
            return f"{archive.name}: {error.strerror or type(error).__name__}"
        self.collector.add(_run_of(item.run), _Members(views))
        return None

    def _limit(self, item: Chosen) -> str | None:
        """Why no more runs are downloaded: once a bound is reached, the older runs all
        stay out (the history keeps the newest runs, with no gap)."""
        if self.stopped is None:
            elapsed = time.monotonic() - self.started
            size = item.artifact.size_in_bytes
            if elapsed > self.bounds.deadline_s:
                self.stopped = self._spent()
            elif self.downloaded + size > self.bounds.max_total_bytes:
                self.stopped = f"left out: over the history's {_mb(self.bounds.max_total_bytes)}"
        return self.stopped

    def _spent(self) -> str:
        return f"left out: the history's {self.bounds.deadline_s:g} s were spent"

    def _download(self, item: Chosen) -> str | None:
        archive, _ = _paths(self.directory, item.run.id)
        try:
            with _scratch(self.directory) as scratch:
                cut = self._download_into(item, scratch)
                if cut:
                    return cut  # the scratch file goes with the block
                self.downloaded += scratch.stat().st_size
                self.manifest.record(item.run.id, None)  # ours from here on, verified or not
                os.replace(scratch, archive)  # a new file in place of whatever was there
        except (GitHubError, ConfigError) as error:
            return error.message
        return self._decode(item, archive)

    def _download_into(self, item: Chosen, scratch: Path) -> str | None:
        """The run's archive into `scratch`; or, when the history's deadline passed during
        the download, why not: the history stops there, as at a deadline between downloads
        (this run and the older ones left out, the newer ones kept)."""
        name, run_id = item.artifact.name, item.run.id
        try:
            with self.session.translated(f"downloading artifact {name} of run {run_id}"):
                location = history_listing.download_location(self.session.rest, item.artifact)
                baseline_fetch.download(location, scratch, name, self.deadline)
        except DeadlineSpent:
            self.stopped = self._spent()
            got = f"{_mb(scratch.stat().st_size)} of {_mb(item.artifact.size_in_bytes)}"
            self.say(
                f"run {run_id}: download stopped at {got}: the history's "
                f"{self.bounds.deadline_s:g} s were spent; it and the older runs are left out"
            )
            return f"{self.stopped} during its download ({got})"
        return None

    def _decode(self, item: Chosen, archive: Path) -> str | None:
        """The archive's results validated in full, with GitHub's commit and time for the
        run, written as run-ID.json (for `--history-dir`) and into the history; the run is
        recorded as verified (its digest), so later fetches only read it."""
        try:
            results = _as_run(baseline_fetch.load_archive(archive, item.artifact.name), item.run)
        except ConfigError as error:
            return error.message
        _, decoded = _paths(self.directory, item.run.id)
        self.manifest.record(item.run.id, None)
        results_io.write_atomic(results, decoded)
        self.manifest.record(item.run.id, item.artifact.digest)
        self.collector.add(_run_of(item.run), results)
        return None

    def _forget(self, run_id: int) -> None:
        if run_id in self.manifest.runs:
            for path in _paths(self.directory, run_id):
                path.unlink(missing_ok=True)
            self.manifest.forget(run_id)

    def prune_scratch(self) -> None:
        """Remove the scratch files of downloads whose process was killed. Not where the
        manifest could not be read: that directory's files are all left alone (its note)."""
        if self.manifest.notes:
            return
        removed = _prune_scratch(self.directory, time.time() - SCRATCH_GRACE_S)
        if removed:
            self.say(f"removed {removed} unfinished download(s) left in {self.directory}")

    def prune(self, keep: set[int]) -> None:
        """Runs that left the window leave the cache: it holds the history, so
        `--history-dir` on it reads exactly these runs. Only files kl-bitexact wrote (the
        manifest's runs) are ever deleted."""
        for run_id in set(self.manifest.runs) - keep:
            self._forget(run_id)


@contextlib.contextmanager
def _scratch(directory: Path) -> Iterator[Path]:
    """A new file in `directory` for one download, locked until it is gone (renamed into
    place, or removed here): `_prune_scratch` never takes a file whose writer lives."""
    handle, name = tempfile.mkstemp(dir=directory, prefix=SCRATCH_PREFIX, suffix=".zip")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)
        os.close(handle)  # the lock goes with the last descriptor


def _prune_scratch(directory: Path, changed_before: float) -> int:
    """Remove unlocked scratch files last changed before `changed_before`, within the
    bounds on entries looked at and files removed; how many were removed."""
    removed = 0
    with os.scandir(directory) as entries:
        for entry in itertools.islice(entries, MAX_SCRATCH_ENTRIES):
            if removed == MAX_SCRATCH_PRUNED:
                break
            if _SCRATCH.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                removed += _remove_abandoned(Path(entry.path), changed_before)
    return removed


def _remove_abandoned(path: Path, changed_before: float) -> bool:
    """Remove `path` if no process holds its lock and it is old enough, taking the lock
    first; a file its writer renamed or removed meanwhile is someone else's (never taken)."""
    try:  # O_NONBLOCK: a FIFO put there meanwhile does not hang the fetch
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone already, or not a plain file
    try:
        if os.fstat(handle).st_mtime >= changed_before:
            return False  # before the lock: a writer about to take it is not kept waiting
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, there = os.fstat(handle), os.stat(path, follow_symlinks=False)
        if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
            return False
        path.unlink()
        return True
    except OSError:  # BlockingIOError: a live download holds it
        return False
    finally:
        os.close(handle)


class _Members:
    """The members of one run's archive (its shards) as one run's tests."""

    def __init__(self, views: list[history_dir.RunView]) -> None:
        self.views = views

    def all_tests(self) -> Iterator[tuple[history_dir._SuiteView, history_dir._TestView]]:
        for view in self.views:
            yield from view.all_tests()


def _run_of(run: ListedRun) -> history.Run:
    """The run as GitHub lists it (the history's time and commit are GitHub's)."""
    return history.Run(run.head_sha, run.created_at, run.id, f"run {run.id}")


@dataclass
class _Manifest:
    """The runs whose files (run-ID.zip, run-ID.json) kl-bitexact wrote in one cache
    directory, each with the digest of the archive it validated and decoded (None: written,
    not verified yet). Saved at every change, atomically: a run killed mid-fetch leaves a
    manifest that still names every file it wrote."""

    path: Path
    runs: dict[int, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    writable: bool = True

    @classmethod
    def read(cls, directory: Path) -> _Manifest:
        path = directory / MANIFEST
        if not path.exists() and not path.is_symlink():
            return cls(path)
        try:
            raw = read_bounded(
                path, what="cache manifest", max_bytes=MAX_MANIFEST_BYTES, follow_symlinks=False
            )
            return cls(path, _manifest_runs(json.loads(raw)))
        except (ConfigError, ValueError, TypeError, RecursionError) as error:
            why = error.message if isinstance(error, ConfigError) else "not a manifest"
            fresh = path.is_file() and not path.is_symlink()
            note = f"history cache {path}: {why}; no file there is deleted"
            return cls(
                path, notes=[note + ("" if fresh else " and none is recorded")], writable=fresh
            )

    def record(self, run_id: int, digest: str | None) -> None:
        if self.runs.get(run_id, "") != digest:
            self.runs[run_id] = digest
            self._save()

    def forget(self, run_id: int) -> None:
        self.runs.pop(run_id, None)
        self._save()

    def _save(self) -> None:
        if self.writable:
            document = {
                "kl_bitexact_history_cache": 1,
                "runs": {str(k): v for k, v in self.runs.items()},
            }
            replace_text(self.path, json.dumps(document, sort_keys=True) + "\n")


def _manifest_runs(document: object) -> dict[int, str | None]:
    if not isinstance(document, dict) or document.get("kl_bitexact_history_cache") != 1:
        raise ValueError("not a manifest")
    runs = document.get("runs")
    if not isinstance(runs, dict):
        raise ValueError("not a manifest")
    found: dict[int, str | None] = {}
    for key, digest in runs.items():
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 20):
            raise ValueError("not a manifest")
        if digest is not None and not isinstance(digest, str):
            raise ValueError("not a manifest")
        found[int(key)] = digest
    return found


def _as_run(results: Results, run: ListedRun) -> Results:
    """The run's identity as GitHub lists it, not as the files inside say."""
    info = structs.replace(
        results.run,
        commit=run.head_sha,
        ref=f"{history_dir.BRANCH_REF}{run.head_branch}",
        started_at=run.created_at,
    )
    return structs.replace(results, run=info)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _paths(directory: Path, run_id: int) -> tuple[Path, Path]:
    return directory / f"run-{run_id}.zip", directory / f"run-{run_id}.json"


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

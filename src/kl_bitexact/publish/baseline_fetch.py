"""Fetch the base branch's results: the newest trusted successful run of a workflow, its artifact.

"A successful run on main" by branch name alone is not the base branch's run: a fork PR
whose branch is also named `main` runs the caller workflow under `pull_request`, and its
results (chosen by the fork) then excused any regression (issue 14, case 2). A run is a
baseline only when its event is one of the trusted ones (`push` by default), its code came
from this repository (`head_repository`), and its commit is on the base branch's history.

The artifact was written by a run that executed code (the base branch's, but still), so
the download is bounded, the archive's members are bounded before they are read, and each
results file goes through `results_io.load` (size limit, schema) like any other.
"""

from __future__ import annotations

import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish.client import Session
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results

if TYPE_CHECKING:  # PyGithub is imported where it is used: the history's fetch needs none of it
    from github import Github
    from github.Artifact import Artifact
    from github.PaginatedList import PaginatedList
    from github.Repository import Repository
    from github.WorkflowRun import WorkflowRun

DEFAULT_ARTIFACT = "kl-bitexact-results"
# Runs to look through for one that still has the artifact (they expire).
MAX_RUNS = 10
MAX_ARCHIVE_BYTES = results_io.MAX_RESULTS_BYTES
# All results files of one artifact together (one per shard), decompressed.
MAX_EXTRACTED_BYTES = 2 * results_io.MAX_RESULTS_BYTES
# Files in one artifact: a shard matrix is tens of entries, not thousands.
MAX_MEMBERS = 1000
CHUNK = 64 * 1024
# What reading a damaged or unusual member raises: a bad CRC, a corrupt deflate stream,
# a compression method or encryption zipfile cannot read, a stream that ends early.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError)
# Events whose runs execute the base branch's own code once merged: a push to it. A
# schedule or workflow_dispatch run of the branch qualifies too when configured.
DEFAULT_EVENTS = ("push",)
# Passed-over runs named in the "baseline unavailable" reason.
MAX_REASONS = 3
# A commit on the branch's history is behind the branch's head, or is that head.
ON_BRANCH = ("identical", "behind")


def workflow_file(workflow_ref: str | None) -> str | None:
    """`owner/repo/.github/workflows/ci.yml@refs/...` (GITHUB_WORKFLOW_REF) -> `ci.yml`."""
    if not workflow_ref or "/.github/workflows/" not in workflow_ref:
        return None
    return workflow_ref.split("/.github/workflows/", 1)[1].split("@", 1)[0] or None


@dataclass(frozen=True)
class Wanted:
    """Which runs may give the baseline: this workflow's, on the base branch, trusted."""

    repository: str
    workflow: str
    branch: str
    artifact: str
    events: tuple[str, ...] = DEFAULT_EVENTS


@dataclass
class _Search:
    """What the run search found, and which runs it passed over and why."""

    artifact: Artifact | None = None
    passed_over: list[str] = field(default_factory=list)


def fetch(
    session: Session,
    repository: str,
    workflow: str,
    branch: str,
    artifact_name: str,
    *,
    events: Sequence[str] = DEFAULT_EVENTS,
) -> Baseline:
    """The newest trusted successful base run's results, or why there are none.

    A base that cannot be had is a reason shown in the comment, not a failure: without it
    the gate simply cannot excuse red tests that were already red on the base.
    """
    wanted = Wanted(repository, workflow, branch, artifact_name, tuple(events))
    try:
        with session.translated(f"looking for the baseline run of {workflow} on {branch}"):
            search = _newest_artifact(session.client, wanted)
            if search.artifact is None:
                return Baseline(None, _none_found(wanted, search.passed_over))
            location = download_location(session.client, search.artifact)
        return Baseline.of(fetch_archive(location, search.artifact, session))
    except (GitHubError, ConfigError) as error:
        return Baseline(None, f"fetching the baseline failed: {error.message}")


def _none_found(wanted: Wanted, passed_over: list[str]) -> str:
    events = " or ".join(wanted.events)
    why = (
        f"no successful {wanted.workflow} run of a {events} on {wanted.branch} in "
        f"{wanted.repository} has a {wanted.artifact} artifact"
    )
    if passed_over:
        listed = "; ".join(passed_over[:MAX_REASONS])
        more = len(passed_over) - MAX_REASONS
        why += f" (passed over: {listed}{f'; {more} more' if more > 0 else ''})"
    return why


def listed_runs(repo: Repository, wanted: Wanted, status: str) -> PaginatedList[WorkflowRun]:
    """The workflow's runs on the branch, newest first, as GitHub lists them: still to be
    judged one by one (`distrust`, `off_branch`), since the filters are only GitHub's."""
    from github.GithubObject import NotSet

    # One trusted event: let GitHub filter, so other events' runs cannot crowd the window.
    event = wanted.events[0] if len(wanted.events) == 1 else NotSet
    return repo.get_workflow(wanted.workflow).get_runs(
        branch=wanted.branch, event=event, status=status
    )


def _newest_artifact(client: Github, wanted: Wanted) -> _Search:
    repo = client.get_repo(wanted.repository)
    runs = listed_runs(repo, wanted, "success")
    search = _Search()
    for run in islice(runs, MAX_RUNS):  # newest first
        artifact = named_artifact(run, wanted.artifact)
        why = distrust(run, wanted) or (artifact and off_branch(repo, run, wanted.branch))
        if why:
            search.passed_over.append(f"run {run.id}: {why}")
        elif artifact is not None:
            search.artifact = artifact
            break
    return search


def named_artifact(run: WorkflowRun, name: str) -> Artifact | None:
    for artifact in run.get_artifacts():
        if artifact.name == name and not artifact.expired:
            return artifact
    return None


class _Origin(Protocol):
    @property
    def full_name(self) -> str: ...


class ListedRunFields(Protocol):
    """What `distrust` reads of a run: PyGithub's WorkflowRun, or the history's `ListedRun`."""

    @property
    def event(self) -> str: ...

    @property
    def head_branch(self) -> str: ...

    @property
    def head_repository(self) -> _Origin | None: ...


def distrust(run: ListedRunFields, wanted: Wanted) -> str | None:
    """Why `run` is not the base branch's own run, from its fields alone (no request)."""
    if run.event not in wanted.events:
        return f"a {run.event} event"
    head = run.head_repository
    origin = head.full_name if head is not None else None
    if origin != wanted.repository:
        return f"code from {origin or 'a deleted repository'}"
    if run.head_branch != wanted.branch:
        return f"branch {run.head_branch}"
    return None


def off_branch(repo: Repository, run: WorkflowRun, branch: str) -> str | None:
    """Why the run's commit is not on the branch's history, if it is not (one request)."""
    from github import GithubException

    try:
        status = repo.compare(branch, run.head_sha).status
    except GithubException as error:
        if error.status not in (404, 422):  # 404/422: no such commit, or no common history
            raise
        status = "unrelated"
    return None if status in ON_BRANCH else f"commit {run.head_sha[:12]} not on {branch}"


class BranchHistory:
    """Whether runs' commits are on the branch's history, for many runs at once: the
    branch's newest commits, listed in one request, answer for the runs of recent pushes;
    a commit not among them is asked about on its own (`off_branch`). Either way the rule is
    one: the commit is reachable from the branch's head."""

    LISTED = 100  # one page

    def __init__(self, repo: Repository, branch: str) -> None:
        self.repo, self.branch = repo, branch
        self._recent: set[str] | None = None

    def off_branch(self, run: WorkflowRun) -> str | None:
        if self._recent is None:
            self._recent = self._list()
        if run.head_sha in self._recent:
            return None
        return off_branch(self.repo, run, self.branch)

    def _list(self) -> set[str]:
        from github import GithubException

        try:
            return {c.sha for c in islice(self.repo.get_commits(sha=self.branch), self.LISTED)}
        except GithubException as error:
            if error.status not in (404, 409, 422):  # no such branch, or an empty repository
                raise
            return set()


def download_location(client: Github, artifact: Artifact) -> str:
    """GitHub answers the archive URL with a redirect to short-lived blob storage."""
    if artifact.size_in_bytes > MAX_ARCHIVE_BYTES:
        raise GitHubError(
            f"artifact {artifact.name} is {artifact.size_in_bytes} bytes, over the "
            f"{MAX_ARCHIVE_BYTES}-byte limit for a results artifact"
        )
    headers, _ = client.requester.requestJsonAndCheck("GET", artifact.archive_download_url)
    location = headers.get("location")
    if not location:
        raise GitHubError(f"artifact {artifact.name}: GitHub gave no download location")
    return str(location)


def fetch_archive(location: str, artifact: Artifact, session: Session) -> results.Results:
    with tempfile.TemporaryDirectory(prefix="kl-bitexact-baseline-") as scratch:
        archive = Path(scratch) / "artifact.zip"
        with session.translated(f"downloading artifact {artifact.name}"):
            download(location, archive, artifact.name)
        return load_archive(archive, artifact.name)


class DeadlineSpent(GitHubError):
    """A download stopped because its deadline passed (the history ends there, saying so)."""


def download(location: str, target: Path, name: str, deadline: float | None = None) -> None:
    """Stream the archive to disk, stopping at the size bound and, once `deadline` (an
    instant on the monotonic clock) passed, with `DeadlineSpent`; no token is sent."""
    from kl_bitexact.publish import blob

    try:
        _stream(location, target, name, deadline)
    except Exception:
        if not blob.passed(deadline):
            raise
    if blob.passed(deadline):  # cut at the deadline, or failed past it: the time was spent
        raise DeadlineSpent(f"artifact {name}: its download ran past the deadline")


def _stream(location: str, target: Path, name: str, deadline: float | None) -> None:
    from kl_bitexact.publish import blob

    with blob.streamed(location, deadline) as answer:
        answer.raise_for_status()
        with blob.cut_at(deadline, answer), target.open("wb") as out:
            for chunk in _bounded(answer.iter_content(CHUNK), name):
                out.write(chunk)
                if blob.passed(deadline):
                    return


def _bounded(chunks: Iterator[bytes], name: str) -> Iterator[bytes]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_ARCHIVE_BYTES:
            raise GitHubError(f"artifact {name} download exceeds {MAX_ARCHIVE_BYTES} bytes")
        yield chunk


def load_archive(archive: Path, name: str, *, max_total: int | None = None) -> results.Results:
    """Every *.json member is a results file (one per shard); merged into one.

    Members are decoded from memory, never extracted: no member name chooses a path, and
    the disk holds only the downloaded archive. What an archive can claim is bounded
    before anything is decompressed (how many members, how many bytes in all: a 735 KB
    zip of members each under the per-file limit expanded to 756 MB, issue 14), and the
    bytes really read are counted against the same bounds.
    """
    sources = archive_members(archive, name, max_total=max_total)
    return results_io.merge(
        [(source, results_io.loads(raw, Path(source))) for source, raw in sources]
    )


def archive_members(
    archive: Path, name: str, *, max_total: int | None = None
) -> list[tuple[str, bytes]]:
    """The bytes of every *.json member, each named `artifact/member`, within the bounds
    `load_archive` states (read from memory, never extracted)."""
    budget = [MAX_EXTRACTED_BYTES if max_total is None else max_total]
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = _json_members(bundle, name, budget[0])
            return [_read_member(bundle, info, name, budget) for info in members]
    except zipfile.BadZipFile:
        raise ConfigError(f"artifact {name}: not a zip archive") from None


def _json_members(bundle: zipfile.ZipFile, name: str, max_total: int) -> list[zipfile.ZipInfo]:
    everything = bundle.infolist()
    if len(everything) > MAX_MEMBERS:
        raise ConfigError(
            f"artifact {name}: {len(everything)} files, over the limit of {MAX_MEMBERS} "
            "for a results artifact"
        )
    members = [info for info in everything if info.filename.endswith(".json")]
    if not members:
        raise ConfigError(f"artifact {name}: no results .json file inside")
    for info in members:
        if info.file_size > results_io.MAX_RESULTS_BYTES:
            raise ConfigError(f"artifact {name}: {info.filename} is over the size limit")
    declared = sum(info.file_size for info in members)
    if declared > max_total:
        raise _over_total(name, declared, max_total)
    return members


def _over_total(name: str, size: int, max_total: int) -> ConfigError:
    return ConfigError(
        f"artifact {name}: {size} bytes is over the {max_total}-byte limit for all results "
        "files of an artifact"
    )


def _read_member(
    bundle: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, budget: list[int]
) -> tuple[str, bytes]:
    """One member's bytes; `budget` holds the bytes the archive may still yield."""
    limit = min(results_io.MAX_RESULTS_BYTES, budget[0])
    try:
        with bundle.open(info) as source:
            raw = source.read(limit + 1)
    except _UNREADABLE as error:
        raise ConfigError(
            f"artifact {name}: {info.filename} cannot be read ({type(error).__name__}: {error})"
        ) from None
    if len(raw) > limit:  # more than declared: zipfile stops at the declared size, but
        raise _over_total(name, len(raw), limit)  # the bound holds without trusting that
    budget[0] -= len(raw)
    return f"{name}/{info.filename}", raw

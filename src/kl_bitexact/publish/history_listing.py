"""Which runs the history takes, listed through the REST reader (no PyGithub: issue 40).

The rules are the baseline's (`baseline_fetch.distrust`, a commit on the branch's history);
the listing asks little: one page of the workflow's runs, the repository's artifacts of the
wanted name (newest first, `LISTED_ARTIFACTS` at most, which answer for the recent
runs at once), a run's own artifacts only when that listing cannot answer for it, the
branch's newest commits once, and a comparison for a commit not among them. Every field read
is typed on the way in: an answer of another shape is a failure of the listing (the history
says it could not be had), never a run or artifact with a field missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice
from typing import Any
from urllib.parse import quote

from kl_bitexact.publish import baseline_fetch
from kl_bitexact.publish.baseline_fetch import ON_BRANCH, Wanted, distrust
from kl_bitexact.publish.client import Trouble, wrong_shape
from kl_bitexact.publish.rest import Rest

# The repository's artifacts looked through (two pages) before asking run by run: pull
# requests' runs upload the same artifact name, and may crowd the base branch's out.
LISTED_ARTIFACTS = 200
# The branch's newest commits listed at once: they answer for the runs of recent pushes.
LISTED_COMMITS = 100


@dataclass(frozen=True)
class Origin:
    full_name: str


@dataclass(frozen=True)
class ListedRun:
    """A workflow run as the runs listing gives it: what the rules and the history read."""

    id: int
    event: str
    head_branch: str
    head_sha: str
    head_repository: Origin | None
    created_at: str  # 2026-05-01T12:00:00Z, in UTC

    @classmethod
    def of(cls, raw: Any) -> ListedRun:
        fields = _object(raw, "a workflow run")
        head = fields.get("head_repository")
        origin = Origin(_text(_object(head, "head_repository"), "full_name")) if head else None
        return cls(
            id=_integer(fields, "id"),
            event=_text(fields, "event"),
            head_branch=_text(fields, "head_branch"),
            head_sha=_text(fields, "head_sha"),
            head_repository=origin,
            created_at=_utc(_text(fields, "created_at")),
        )


@dataclass(frozen=True)
class ListedArtifact:
    """An artifact as GitHub lists it; `run_id` None when the listing names no run."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool
    archive_download_url: str
    digest: str | None
    run_id: int | None

    @classmethod
    def of(cls, raw: Any) -> ListedArtifact:
        fields = _object(raw, "an artifact")
        digest, run = fields.get("digest"), fields.get("workflow_run")
        return cls(
            id=_integer(fields, "id"),
            name=_text(fields, "name"),
            size_in_bytes=_integer(fields, "size_in_bytes"),
            expired=_flag(fields, "expired"),
            archive_download_url=_text(fields, "archive_download_url"),
            digest=digest if isinstance(digest, str) and digest else None,
            run_id=_integer(run, "id") if isinstance(run, dict) else None,
        )


@dataclass
class Chosen:
    run: ListedRun
    artifact: ListedArtifact


@dataclass
class Search:
    chosen: list[Chosen] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)


def search(rest: Rest, wanted: Wanted, runs: int, scan: int) -> Search:
    """The newest `runs` runs the history may take, among the newest `scan` listed, and
    why each other one was passed over."""
    artifacts, branch = _Artifacts(rest, wanted), _Branch(rest, wanted)
    found = Search()
    for raw in islice(_listed_runs(rest, wanted, scan), scan):
        run = ListedRun.of(raw)
        why = distrust(run, wanted)
        artifact = None if why else artifacts.of(run.id)
        if not why and artifact is None:
            why = f"no {wanted.artifact} artifact (expired, or the run uploaded none)"
        why = why or branch.off_branch(run)
        if why:
            found.passed_over.append(f"run {run.id}: {why}")
            continue
        assert artifact is not None
        found.chosen.append(Chosen(run, artifact))
        if len(found.chosen) == runs:
            break
    return found


def download_location(rest: Rest, artifact: ListedArtifact) -> str:
    """The archive's short-lived blob URL (GitHub redirects there), within the size bound."""
    limit = baseline_fetch.MAX_ARCHIVE_BYTES
    if artifact.size_in_bytes > limit:
        raise Trouble(
            lambda doing: (
                f"artifact {artifact.name} is {artifact.size_in_bytes} bytes, over the "
                f"{limit}-byte limit for a results artifact",
                None,
            )
        )
    return rest.redirect(artifact.archive_download_url)


def _listed_runs(rest: Rest, wanted: Wanted, scan: int) -> Iterator[Any]:
    params = {"branch": wanted.branch, "status": "completed"}
    if len(wanted.events) == 1:  # one trusted event: GitHub filters, nothing crowds it out
        params["event"] = wanted.events[0]
    path = f"/repos/{wanted.repository}/actions/workflows/{quote(wanted.workflow, safe='')}/runs"
    return rest.pages(path, params, "workflow_runs", scan)


class _Artifacts:
    """The wanted artifact of each run: from the repository's listing by name while it
    reaches back that far, else from the run's own listing (one request)."""

    def __init__(self, rest: Rest, wanted: Wanted) -> None:
        self.rest, self.wanted = rest, wanted
        self.by_run: dict[int, ListedArtifact] = {}
        self.listed = self._repository_listing()
        self.seen = 0
        self.complete = False  # the listing ended within its bound: it holds every run's

    def of(self, run_id: int) -> ListedArtifact | None:
        while run_id not in self.by_run and self._more():
            pass
        if run_id in self.by_run:
            return self.by_run[run_id]
        return None if self.complete else self._of_run(run_id)

    def _repository_listing(self) -> Iterator[Any]:
        path = f"/repos/{self.wanted.repository}/actions/artifacts"
        params = {"name": self.wanted.artifact}
        return iter(self.rest.pages(path, params, "artifacts", LISTED_ARTIFACTS))

    def _more(self) -> bool:
        """One more artifact of the listing read; False once it has no more."""
        raw = next(self.listed, None)
        if raw is None:
            # Ended before its bound: the listing held every artifact of the name.
            self.complete = self.seen < LISTED_ARTIFACTS
            return False
        self.seen += 1
        self._keep(ListedArtifact.of(raw))
        return True

    def _keep(self, artifact: ListedArtifact) -> None:
        usable = artifact.name == self.wanted.artifact and not artifact.expired
        if usable and artifact.run_id is not None:
            self.by_run.setdefault(artifact.run_id, artifact)

    def _of_run(self, run_id: int) -> ListedArtifact | None:
        path = f"/repos/{self.wanted.repository}/actions/runs/{run_id}/artifacts"
        for raw in self.rest.pages(path, {"name": self.wanted.artifact}, "artifacts", 100):
            artifact = ListedArtifact.of(raw)
            if artifact.name == self.wanted.artifact and not artifact.expired:
                return artifact
        return None


class _Branch:
    """Whether a run's commit is on the branch's history: among its newest commits (listed
    once), else asked of GitHub for that commit (the rule `baseline_fetch.off_branch` has)."""

    def __init__(self, rest: Rest, wanted: Wanted) -> None:
        self.rest, self.wanted = rest, wanted
        self._recent: set[str] | None = None

    def off_branch(self, run: ListedRun) -> str | None:
        if self._recent is None:
            self._recent = self._list()
        if run.head_sha in self._recent:
            return None
        status = self._compare(run.head_sha)
        branch = self.wanted.branch
        return None if status in ON_BRANCH else f"commit {run.head_sha[:12]} not on {branch}"

    def _list(self) -> set[str]:
        path = f"/repos/{self.wanted.repository}/commits"
        params = {"sha": self.wanted.branch}
        try:
            commits = self.rest.pages(path, params, None, LISTED_COMMITS)
            return {_text(_object(raw, "a commit"), "sha") for raw in commits}
        except Trouble as trouble:
            if trouble.status in (404, 409, 422):  # no such branch, or an empty repository
                return set()
            raise

    def _compare(self, sha: str) -> str:
        basehead = f"{quote(self.wanted.branch)}...{quote(sha)}"
        try:
            answer = self.rest.get(f"/repos/{self.wanted.repository}/compare/{basehead}")
        except Trouble as trouble:
            if trouble.status in (404, 422):  # no such commit, or no common history
                return "unrelated"
            raise
        return _text(_object(answer, "a comparison"), "status")


# --- typed fields ---------------------------------------------------------------------


def _shape(what: str) -> Trouble:
    return Trouble(lambda doing: wrong_shape(doing, what))


def _object(raw: Any, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _shape(f"{what} that is not an object")
    return raw


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str):
        raise _shape(f"{name} is not a string")
    return value


def _integer(fields: dict[str, Any], name: str) -> int:
    value = fields.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _shape(f"{name} is not an integer")
    return value


def _flag(fields: dict[str, Any], name: str) -> bool:
    value = fields.get(name)
    if not isinstance(value, bool):
        raise _shape(f"{name} is not a boolean")
    return value


def _utc(stamp: str) -> str:
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        raise _shape(f"created_at {stamp[:40]!r} is not a time") from None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")

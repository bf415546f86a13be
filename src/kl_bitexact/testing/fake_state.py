"""What the local GitHub knows: repositories, pull requests, issues, comments, runs.

A plain mutable model guarded by one lock; the HTTP layer (fake_github.py) turns requests
into calls on it. Seeds and snapshots are JSON so a test in another process (the
`act` run) can set the scene and check what arrived.
"""

from __future__ import annotations

import io
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Comment:
    id: int
    issue: int
    body: str
    user: str
    created_at: str
    updated_at: str


@dataclass
class Pull:
    number: int
    state: str = "open"  # open | closed
    merged: bool = False
    head_sha: str = "0" * 40
    head_ref: str = "feature"
    base_ref: str = "main"
    title: str = "A pull request"
    # Their names; `World.label` also records who added one (a seeded name has no event).
    labels: list[str] = field(default_factory=list)
    author: str = "octocat"  # the login of who opened it (`user` in GitHub's answer)


@dataclass
class Issue:
    number: int
    state: str = "open"  # open | closed
    state_reason: str | None = None  # completed | not_planned | reopened
    title: str = "An issue"


@dataclass
class IssueEvent:
    """A `labeled` or `unlabeled` event on a pull request: who changed which label."""

    id: int
    issue: int
    event: str  # labeled | unlabeled
    label: str
    actor: str
    created_at: str


@dataclass
class Artifact:
    id: int
    run_id: int
    name: str
    archive: bytes
    expired: bool = False


@dataclass
class Run:
    id: int
    workflow: str  # the workflow file name, e.g. "kl-bitexact.yml"
    branch: str = "main"
    event: str = "push"
    status: str = "completed"
    conclusion: str | None = "success"
    head_sha: str = "0" * 40
    created_at: str = field(default_factory=now_iso)
    # Where the run's code came from: a fork's PR runs carry the fork (None: this repository).
    head_repository: str | None = None


@dataclass
class Repo:
    full_name: str
    private: bool = False  # what GET /repos/{owner}/{repo} and a pull's base.repo say
    pulls: dict[int, Pull] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    comments: list[Comment] = field(default_factory=list)
    events: list[IssueEvent] = field(default_factory=list)  # oldest first, as GitHub lists them
    statuses: list[dict[str, Any]] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    # Each branch's history, oldest commit first (what GET .../compare answers from).
    branches: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Fault:
    """An injected answer for the next `times` requests matching method and path regex."""

    method: str
    path: str
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1
    # Seconds from now for x-ratelimit-reset (a primary rate limit); None: no such header.
    reset_in: float | None = None
    # The request takes effect first, then gets this answer: a "ghost" 502 from a proxy
    # that timed out while GitHub created the comment anyway.
    applied: bool = False


@dataclass
class Hold:
    """Keep matching requests waiting until `parties` of them arrived (a forced race)."""

    method: str
    path: str
    barrier: threading.Barrier


@dataclass
class Stall:
    """Send the first `after_bytes` of the next `times` matching blob downloads, then wait
    for `release` (at most `timeout` s) before the rest: a download caught halfway."""

    path: str
    after_bytes: int
    release: threading.Event
    times: int = 1
    timeout: float = 60.0


@dataclass
class Trickle:
    """Send the next `times` matching blob downloads `step` bytes at a time, one step every
    `interval` s: a server (or a proxy) that never lets a read time out, nor finishes soon."""

    path: str
    step: int
    interval: float
    times: int = 1


class World:
    """Everything the fake serves, plus what it saw (requests, spec violations)."""

    def __init__(self, token: str, actor: str = "github-actions[bot]") -> None:
        self.lock = threading.RLock()
        self.token = token
        # Who the token is: comments are created as this login, and only its own
        # comments may be edited or deleted.
        self.actor = actor
        self.repos: dict[str, Repo] = {}
        self.faults: list[Fault] = []
        self.holds: list[Hold] = []
        self.stalls: list[Stall | Trickle] = []
        self.requests: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self._next_id = 1000

    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def repo(self, full_name: str) -> Repo:
        with self.lock:
            return self.repos.setdefault(full_name, Repo(full_name))

    def add_comment(self, full_name: str, issue: int, body: str, user: str = "octocat") -> Comment:
        stamp = now_iso()
        comment = Comment(self.new_id(), issue, body, user, stamp, stamp)
        with self.lock:
            self.repo(full_name).comments.append(comment)
        return comment

    def label(self, full_name: str, number: int, name: str, actor: str) -> None:
        """`actor` puts label `name` on pull request `number`: it is on it, and a `labeled`
        event says who put it there (as on GitHub, adding a label it has changes nothing)."""
        with self.lock:
            pull = self.repo(full_name).pulls[number]
            if name not in pull.labels:
                pull.labels.append(name)
                self._record_event(full_name, number, "labeled", name, actor)

    def unlabel(self, full_name: str, number: int, name: str, actor: str) -> None:
        """`actor` takes label `name` off pull request `number` (an `unlabeled` event)."""
        with self.lock:
            pull = self.repo(full_name).pulls[number]
            if name in pull.labels:
                pull.labels.remove(name)
                self._record_event(full_name, number, "unlabeled", name, actor)

    def _record_event(self, full_name: str, number: int, kind: str, name: str, actor: str) -> None:
        event = IssueEvent(self.new_id(), number, kind, name, actor, now_iso())
        self.repo(full_name).events.append(event)

    def add_run(self, full_name: str, run: Run, files: Mapping[str, bytes], name: str) -> Artifact:
        artifact = Artifact(self.new_id(), run.id, name, zip_bytes(files))
        with self.lock:
            repo = self.repo(full_name)
            repo.runs.append(run)
            repo.artifacts.append(artifact)
            if run.event == "push" and run.head_repository in (None, full_name):
                # A push run's commit is on its branch (as on GitHub); nothing else's is.
                history = repo.branches.setdefault(run.branch, [])
                if run.head_sha not in history:
                    history.append(run.head_sha)
        return artifact

    def seed(self, document: Mapping[str, Any]) -> None:
        """Add what a JSON seed describes (the format: docs/fake-github.md)."""
        for full_name, spec in document.get("repos", {}).items():
            self._seed_repo(full_name, spec)

    def _seed_repo(self, full_name: str, spec: Mapping[str, Any]) -> None:
        repo = self.repo(full_name)
        repo.private = bool(spec.get("private", repo.private))
        for pull in spec.get("pulls", ()):
            repo.pulls[pull["number"]] = Pull(**pull)
        for issue in spec.get("issues", ()):
            repo.issues[issue["number"]] = Issue(**issue)
        for comment in spec.get("comments", ()):
            user = comment.get("user", "octocat")  # a login ending in [bot] is a bot
            self.add_comment(full_name, comment["issue"], comment["body"], user)
        for run_spec in spec.get("runs", ()):
            self._seed_run(full_name, dict(run_spec))
        for branch, history in spec.get("branches", {}).items():
            repo.branches.setdefault(branch, []).extend(history)
        changes = {"labeled": self.label, "unlabeled": self.unlabel}
        for event in spec.get("events", ()):
            changes[event["event"]](full_name, event["issue"], event["label"], event["actor"])

    def _seed_run(self, full_name: str, run: dict[str, Any]) -> None:
        artifact = run.pop("artifact", None) or {"name": "kl-bitexact-results", "files": {}}
        files = {name: text.encode() for name, text in artifact["files"].items()}
        run.setdefault("id", self.new_id())
        self.add_run(full_name, Run(**run), files, artifact["name"])

    def snapshot(self) -> dict[str, Any]:
        """What arrived, as JSON: comments, statuses, requests and spec violations."""
        with self.lock:
            return {
                "repos": {name: _repo_snapshot(repo) for name, repo in self.repos.items()},
                "requests": list(self.requests),
                "violations": list(self.violations),
            }


def _repo_snapshot(repo: Repo) -> dict[str, Any]:
    return {
        "comments": [asdict(comment) for comment in repo.comments],
        "events": [asdict(event) for event in repo.events],
        "statuses": list(repo.statuses),
        "pulls": [asdict(pull) for pull in repo.pulls.values()],
        "issues": [asdict(issue) for issue in repo.issues.values()],
    }


def zip_bytes(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()

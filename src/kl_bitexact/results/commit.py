"""Which commit a run tests, and which commit a GitHub event asks to be tested.

A verdict belongs to one commit (issue 30, item 1). `run` and `pytest` record the commit
whose files they ran - the HEAD of the checkout they run in, read from its `.git` (no git
process: the checkout's config is not consulted) - not `GITHUB_SHA`, which under
`pull_request` is GitHub's test merge and under `workflow_run` the default branch's head,
neither the commit checked out. `publish` marks a commit only if the results tested it.

`event_head` is the one rule for the commit an event is about: the reusable workflow
checks out what it says (the action's `trust` step hands it on as `head-sha`), and
`publish` marks what it says unless told otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError

FULL_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
# HEAD, a ref or packed-refs: small files; anything larger is not a checkout we made.
_MAX_GIT_FILE = 1024 * 1024
_GIT_LINK = "gitdir: "

# Events whose commit is the head of a pull request (or of the run that one started).
_PULL_REQUEST_EVENTS = (
    "pull_request",
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
)
# Events that test the repository's own commit, GITHUB_SHA (a push, the merge queue's
# temporary branch, a schedule or dispatch on a branch).
_OWN_COMMIT_EVENTS = (
    "push",
    "merge_group",
    "schedule",
    "workflow_dispatch",
    "repository_dispatch",
)
SUPPORTED_EVENTS = (*_PULL_REQUEST_EVENTS, "workflow_run", *_OWN_COMMIT_EVENTS)


def event_head(event_name: str, event: Mapping[str, Any], github_sha: str | None) -> str:
    """The commit this event asks to be tested and marked; an event with no such commit
    (issue_comment, release, ...) is refused by name, never guessed."""
    if event_name in _PULL_REQUEST_EVENTS:
        found, where = payload_head(event), "pull_request.head.sha"
    elif event_name == "workflow_run":
        found, where = payload_head(event), "workflow_run.head_sha"
    elif event_name in _OWN_COMMIT_EVENTS:
        found, where = _sha(github_sha), "GITHUB_SHA"
    else:
        raise ConfigError(
            f"the {event_name or 'unnamed'} event is not one kl-bitexact can test: it names no "
            f"commit to check out and mark (supported: {', '.join(SUPPORTED_EVENTS)})",
            hint="trigger the workflow on one of those events",
        )
    if found is None:
        raise ConfigError(f"the {event_name} event has no full commit SHA at {where}")
    return found


def payload_head(event: Mapping[str, Any]) -> str | None:
    """The head an event's payload names: a pull request's, else the run's that a
    workflow_run follows (None when it names neither as a full SHA)."""
    return _sha(_field(event, "pull_request", "head", "sha")) or _sha(
        _field(event, "workflow_run", "head_sha")
    )


def checkout_commit(directory: Path) -> str | None:
    """The commit checked out where `directory` lies (the HEAD of the nearest checkout at
    or above it, as git finds it), or None outside a checkout or when HEAD is unresolved."""
    absolute = directory.absolute()
    top = next((d for d in (absolute, *absolute.parents) if (d / ".git").exists()), None)
    git_dir = None if top is None else _git_dir(top / ".git")
    if git_dir is None:
        return None
    head = _read(git_dir / "HEAD")
    if head is None:
        return None
    if not head.startswith("ref: "):
        return _sha(head)
    return _resolve(git_dir, head.removeprefix("ref: ").strip())


def _git_dir(dot_git: Path) -> Path | None:
    """`.git` itself, or where a worktree's or submodule's `.git` file points."""
    if dot_git.is_dir():
        return dot_git
    link = _read(dot_git)
    if link is None or not link.startswith(_GIT_LINK):
        return None
    return (dot_git.parent / link.removeprefix(_GIT_LINK).strip()).resolve()


def _resolve(git_dir: Path, ref: str) -> str | None:
    """A branch's commit: its loose ref, else its line in packed-refs (a worktree keeps
    them in the main repository's directory, named in `commondir`)."""
    common = _read(git_dir / "commondir")
    places = [git_dir] + ([(git_dir / common.strip()).resolve()] if common else [])
    for place in places:
        loose = _read(place / ref)
        if loose is not None:
            return _sha(loose)
        for line in (_read(place / "packed-refs") or "").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return _sha(sha)
    return None


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            return file.read(_MAX_GIT_FILE).decode("ascii", "replace").strip()
    except OSError:
        return None


def _sha(text: object) -> str | None:
    return text if isinstance(text, str) and FULL_SHA.match(text) else None


def _field(event: Mapping[str, Any], *keys: str) -> object:
    value: object = event
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value

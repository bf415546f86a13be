"""The one sticky PR comment, found by its hidden marker, edited in place.

A busy pull request has hundreds of comments, so every page is read. Two publishers can
race (two workflows, a re-run while the first is still posting): both see no comment and
both create one. Each therefore looks again after creating and keeps only the oldest
marked comment, deleting the rest; a publisher whose own comment lost then writes its body
into the survivor. Whatever the interleaving, one comment remains.

A creation answered with a 5xx may still have taken effect (a proxy's "ghost" 502), so it
is never posted again blindly: publish looks for the comment first (issue 14, case 9).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from github import Github, GithubException

from kl_bitexact.report.render import marker

HISTORY_MARKER = "<!-- kl-bitexact:history -->"
MAX_HISTORY_LINES = 20
MAX_HISTORY_LINE_CHARS = 80
# Room the history section may take: render the body with a budget this much smaller
# than GitHub's comment limit.
HISTORY_RESERVE = len(HISTORY_MARKER) + 80 + MAX_HISTORY_LINES * (MAX_HISTORY_LINE_CHARS + 3)


class UserLike(Protocol):
    @property
    def login(self) -> str: ...

    @property
    def type(self) -> str: ...


class CommentLike(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def user(self) -> UserLike | None: ...

    @property
    def body(self) -> str: ...

    def edit(self, body: str) -> None: ...

    def delete(self) -> None: ...


class PullLike(Protocol):
    """What the sticky comment needs of a PyGithub PullRequest (or Issue)."""

    def get_issue_comments(self) -> Iterable[CommentLike]: ...

    def create_issue_comment(self, body: str) -> CommentLike: ...


@dataclass(frozen=True)
class Outcome:
    action: str  # "created", "updated" or "unchanged"
    comment_id: int
    deleted: tuple[int, ...] = ()


def content(body: str) -> str:
    """The body without its history section: what 'unchanged' compares."""
    return body.split(f"\n\n{HISTORY_MARKER}", 1)[0]


def compose(body: str, previous: str | None, history_line: str | None) -> str:
    """`body`, plus the previous body's history and `history_line` when one is given."""
    if history_line is None:
        return body
    lines = [*_history(previous), history_line[:MAX_HISTORY_LINE_CHARS]][-MAX_HISTORY_LINES:]
    listing = "\n".join(f"- {line}" for line in lines)
    history = f"<details><summary>History</summary>\n\n{listing}\n</details>\n"
    return f"{body}\n\n{HISTORY_MARKER}\n{history}"


def _history(previous: str | None) -> list[str]:
    if previous is None or HISTORY_MARKER not in previous:
        return []
    section = previous.split(HISTORY_MARKER, 1)[1]
    return [line[2:] for line in section.splitlines() if line.startswith("- ")]


def upsert(
    pull: PullLike,
    key: str,
    body: str,
    *,
    history_line: str | None = None,
    author: str,
    create: Attempts | None = None,
) -> Outcome:
    """Create, edit or leave alone the comment marked with `key`; never leave two.

    `body` is rendered with room for the history section (HISTORY_RESERVE). Only comments
    by `author` (the publishing identity, `publishing_login`) count: anyone, another bot
    included, can post a comment starting with the marker, and trying to edit or delete
    it would fail the publish.
    """
    mark = marker(key)
    body = body if body.startswith(mark) else f"{mark}\n{body}"
    ours = _Ours(mark, author)
    found = _marked(pull, ours)
    if not found:
        created = _create(pull, ours, compose(body, None, history_line), create)
        return _settle(pull, ours, created, body, history_line)
    keep, duplicates = found[0], found[1:]
    deleted = _delete(duplicates)
    if content(keep.body) == body:
        return Outcome("unchanged", keep.id, deleted)
    keep.edit(compose(body, keep.body, history_line))
    return Outcome("updated", keep.id, deleted)


@dataclass(frozen=True)
class _Ours:
    """Which comments are ours: the marker first, by the publishing identity."""

    mark: str
    author: str

    def __call__(self, comment: CommentLike) -> bool:
        user = comment.user
        if user is None or not (comment.body or "").startswith(self.mark):
            return False
        return user.login.lower() == self.author.lower()  # logins ignore case


@dataclass(frozen=True)
class Attempts:
    """How often a comment's creation is tried when GitHub answers 5xx, and the pause
    before the first retry (doubling after each)."""

    times: int = 4
    backoff_s: float = 1.0


def _create(pull: PullLike, ours: _Ours, text: str, attempts: Attempts | None) -> CommentLike:
    """POST the comment; after a 5xx, look before posting again: it may exist already."""
    attempts = attempts or Attempts()
    for attempt in range(attempts.times):
        try:
            return pull.create_issue_comment(text)
        except GithubException as error:
            if error.status < 500 or attempt == attempts.times - 1:
                raise
        time.sleep(attempts.backoff_s * 2**attempt)
        found = _marked(pull, ours)
        if found:  # the 5xx was a ghost: the comment was created
            return found[0]
    raise AssertionError("unreachable: the last attempt returns or raises")


def _marked(pull: PullLike, ours: _Ours) -> list[CommentLike]:
    """Every comment of ours across all pages, oldest first."""
    found = [comment for comment in pull.get_issue_comments() if ours(comment)]
    return sorted(found, key=lambda comment: comment.id)


def _settle(
    pull: PullLike, ours: _Ours, created: CommentLike, body: str, history_line: str | None
) -> Outcome:
    """After creating: if a racing publisher created one too, keep only the oldest."""
    found = _marked(pull, ours) or [created]
    keep = found[0]
    deleted = _delete(found[1:])
    if keep.id == created.id:
        return Outcome("created", keep.id, deleted)
    if content(keep.body) != body:
        keep.edit(compose(body, keep.body, history_line))
    return Outcome("updated", keep.id, deleted)


def _delete(comments: Iterable[CommentLike]) -> tuple[int, ...]:
    deleted = []
    for comment in comments:
        try:
            comment.delete()
        except GithubException as error:
            if error.status != 404:  # 404: the other publisher deleted it first
                raise
        deleted.append(comment.id)
    return tuple(deleted)


# Who GITHUB_TOKEN posts as. It cannot read GET /user (an installation token: 403).
ACTIONS_BOT = "github-actions[bot]"


def publishing_login(client: Github, named: str | None) -> str:
    """The exact login our comments carry: `--comment-author` when given, else the token's
    own user (GET /user: a personal access token), else `github-actions[bot]` (an
    installation token, which GET /user refuses). A GitHub App's own token posts as
    `<app-slug>[bot]`: name it with --comment-author."""
    if named:
        return named
    try:
        _, user = client.requester.requestJsonAndCheck("GET", "/user")
    except GithubException as error:
        if error.status in (401, 403):  # GITHUB_TOKEN: "Resource not accessible by integration"
            return ACTIONS_BOT
        raise
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) and login else ACTIONS_BOT

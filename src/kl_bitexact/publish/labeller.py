"""Who put the maintainers' label on a pull request, from its issue events.

The `--blocker-label` label lets the `blocked_by` markers a PR adds excuse its red tests
(compare/excuses.py), but only when someone other than the PR's author applied it: an
author with triage or write access can label their own pull request. Only the issue's
events say who applied a label (`GET /repos/{owner}/{repo}/issues/{n}/events`): the latest
`labeled` event of the label, not followed by an `unlabeled` one, put the label that is on
the pull request now.

Asked only when the label is on the pull request. The events of a long-lived PR run into
hundreds, so at most MAX_EVENTS are read (10 pages). Events that cannot be read (a token
without `issues: read`, GitHub unreachable), more of them than that, or none that says who
added the label: who added it is not known, and the label vouches for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

from github.PullRequest import PullRequest

from kl_bitexact.compare.excuses import Labelling
from kl_bitexact.errors import GitHubError
from kl_bitexact.publish.client import Session

# Events read per pull request: 10 pages of 100 (client.PER_PAGE), 2.5 s at the default
# pacing; a PR with more is one whose labeller is not known.
MAX_EVENTS = 1000


@dataclass(frozen=True)
class LabelEvent:
    """One `labeled` (added) or `unlabeled` event of the label; GitHub's event ids grow
    with time, so the largest is the latest."""

    id: int
    added: bool
    actor: str | None  # None: GitHub names nobody (a deleted account)
    bot: bool = False  # the actor is a bot account (type Bot, or an App's `NAME[bot]`)


def labelling(session: Session, pull: PullRequest, label: str) -> Labelling:
    """Who applied `label`, now on `pull`, and who opened `pull`; what is not known, why."""
    labelled = _labeller(session, pull, label)
    author = _login(pull.raw_data.get("user"))
    unknown_author = None if author else "GitHub does not say who opened the pull request"
    return replace(labelled, author=author, unchecked=labelled.unchecked or unknown_author)


def _labeller(session: Session, pull: PullRequest, label: str) -> Labelling:
    """Who applied `label` (the author left for `labelling`), or None and why not known."""
    try:
        with session.translated("reading the pull request's events"):
            events, more = _label_events(pull, label)
    except GitHubError as error:
        return Labelling(None, None, error.message)
    if more:
        why = f"the pull request has more than {MAX_EVENTS} events, which are not read"
        return Labelling(None, None, why)
    latest = latest_added(events)
    if latest is None:
        return Labelling(None, None, "no event of the pull request says who added it")
    unnamed = None if latest.actor else "GitHub names no account for it"
    return Labelling(latest.actor, None, unnamed, latest.bot)


def latest_added(events: Iterable[LabelEvent]) -> LabelEvent | None:
    """The event that put the label on, if the latest event of the label added it (pure)."""
    latest = max(events, key=lambda event: event.id, default=None)
    return latest if latest is not None and latest.added else None


def _label_events(pull: PullRequest, label: str) -> tuple[list[LabelEvent], bool]:
    """The label's events among the first MAX_EVENTS, and whether there are more.

    Fields are read only where the event has them: PyGithub fetches a missing one from
    the event's own URL, one request per event."""
    found, seen = [], 0
    for event in islice(pull.get_issue_events(), MAX_EVENTS + 1):
        seen += 1
        if event.event in ("labeled", "unlabeled") and event.label and event.label.name == label:
            actor = event.actor.login if event.actor else None
            # `type` is in GitHub's simple user (no request); raw_data would fetch the event.
            kind = event.actor.type if event.actor else None
            found.append(
                LabelEvent(event.id, event.event == "labeled", actor, _is_bot(actor, kind))
            )
    return found, seen > MAX_EVENTS


def _login(user: Any) -> str | None:
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) and login else None


def _is_bot(login: str | None, kind: str | None) -> bool:
    """A bot account: GitHub's `type: Bot`, or a login an App's bot has (`NAME[bot]`)."""
    return kind == "Bot" or (login or "").endswith("[bot]")

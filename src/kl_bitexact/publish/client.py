"""The session with GitHub: where it talks to, the token, and the one wording of its errors.

Where to talk to (API URL, repository, pull request) comes from options first, then the
environment GitHub Actions sets (`GITHUB_API_URL`, `GITHUB_REPOSITORY`, the event file), so
GitHub Enterprise Server works unchanged. Retries (both clients): 5xx with exponential
backoff, secondary rate limits after `Retry-After`, the primary rate limit by waiting for its
reset when that is short and failing clearly when it is not. The token never appears in a
message: errors are rebuilt from status and GitHub's `message` field, and every message is
scrubbed once more.

The token lives in one object, `Session` (built by `open_session` or `connect`), and the two
clients it builds when first used: PyGithub's (`pygithub_client.py`) and the REST reader
(`rest.py`, over http.client: a warm history fetch imports neither PyGithub nor requests,
issue 40). Nothing else holds it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.results.commit import FULL_SHA, payload_head
from kl_bitexact.untrusted import jsonfile

if TYPE_CHECKING:
    from github import Github

    from kl_bitexact.publish.rest import Rest

DEFAULT_API_URL = "https://api.github.com"

_REPOSITORY = re.compile(r"^[\w.-]+/[\w.-]+$")
# GitHub caps list pages at 100; fewer round trips on a PR with hundreds of comments.
PER_PAGE = 100


@dataclass(frozen=True)
class ClientSettings:
    """Timeouts, retries and pacing; `from_env` lets tests (and impatient users) shrink them."""

    timeout_s: int = 30
    retries: int = 5
    backoff_factor: float = 1.0  # waits 0, 2, 4, 8... seconds between 5xx retries
    max_rate_limit_wait_s: float = 300.0  # wait for a primary-limit reset at most this long
    secondary_rate_wait_s: float = 60.0  # when a secondary limit gives no Retry-After
    seconds_between_requests: float = 0.25
    seconds_between_writes: float = 1.0  # GitHub asks integrators to pace writes

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ClientSettings:
        names = {
            "timeout_s": "KL_BITEXACT_GITHUB_TIMEOUT",
            "retries": "KL_BITEXACT_GITHUB_RETRIES",
            "backoff_factor": "KL_BITEXACT_GITHUB_BACKOFF",
            "max_rate_limit_wait_s": "KL_BITEXACT_GITHUB_MAX_RATE_WAIT",
            "secondary_rate_wait_s": "KL_BITEXACT_GITHUB_SECONDARY_WAIT",
            "seconds_between_requests": "KL_BITEXACT_GITHUB_REQUEST_INTERVAL",
            "seconds_between_writes": "KL_BITEXACT_GITHUB_WRITE_INTERVAL",
        }
        defaults = cls()
        values = {
            name: _number(env, variable, type(getattr(defaults, name)))
            for name, variable in names.items()
            if env.get(variable)
        }
        return cls(**values)


def _number(env: Mapping[str, str], variable: str, kind: type) -> Any:
    try:
        value = kind(env[variable])
    except ValueError:
        raise ConfigError(
            f"environment variable {variable}={env[variable]!r} is not a number",
            hint=f"set {variable} to a non-negative {kind.__name__}, or unset it",
        ) from None
    if value < 0:
        raise ConfigError(f"environment variable {variable} must not be negative")
    return value


@dataclass(frozen=True)
class Target:
    """Which GitHub, which repository, which pull request."""

    api_url: str
    repository: str
    pr_number: int | None = None
    # The PR head the triggering event saw: the commit that was tested, which is where the
    # status belongs even if the PR has moved on since.
    head_sha: str | None = None


@dataclass(frozen=True)
class PullRequestTarget:
    """One pull request, its number known: what the comment and the status are written to."""

    repository: str
    number: int
    # The commit that was tested (see Target.head_sha); None: the PR's current head.
    head_sha: str | None = None

    def __str__(self) -> str:
        return f"{self.repository}#{self.number}"


def resolve_target(
    env: Mapping[str, str],
    *,
    repository: str | None = None,
    pr_number: int | None = None,
    api_url: str | None = None,
    head_sha: str | None = None,
) -> Target:
    """Options win over the environment; the event file fills in the pull request."""
    repository = repository or env.get("GITHUB_REPOSITORY")
    # The message names both places the repository can come from: outside Actions there is
    # no GITHUB_REPOSITORY, and `None is not owner/name` told nobody about --repo.
    if not repository:
        raise ConfigError(
            "no repository to publish to: pass --repo OWNER/NAME or set GITHUB_REPOSITORY",
            hint="GitHub Actions sets GITHUB_REPOSITORY; elsewhere, e.g. --repo sgl-project/sglang",
        )
    if not _REPOSITORY.match(repository):
        raise ConfigError(
            f"repository {repository!r} (from --repo or GITHUB_REPOSITORY) is not OWNER/NAME",
            hint="pass --repo OWNER/NAME, e.g. --repo sgl-project/sglang",
        )
    url = (api_url or env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    if head_sha is not None and not FULL_SHA.match(head_sha):
        raise ConfigError(
            f"--sha {head_sha!r}: not a full commit SHA (40 hexadecimal digits)",
            hint='pass the whole SHA, e.g. --sha "$(git rev-parse HEAD)", or leave --sha out',
        )
    event = read_event(env.get("GITHUB_EVENT_PATH"))
    number = pr_number if pr_number is not None else _event_pr(event)
    # Under workflow_run (the fork-safe stage 2) `workflow_run.pull_requests` is empty for
    # forks, so `--pr` names the PR: the status still belongs to the tested
    # `workflow_run.head_sha`, never to the PR's head by now (a push in between would get
    # the old commit's verdict).
    named_by_option = isinstance(event.get("workflow_run"), dict) and _event_pr(event) is None
    if pr_number is None or number == _event_pr(event) or named_by_option:
        head_sha = head_sha or payload_head(event)
    return Target(url, repository, number, head_sha)


def read_event(event_path: str | None) -> Mapping[str, Any]:
    """The triggering event's payload (GITHUB_EVENT_PATH), or {} outside Actions."""
    if not event_path:
        return {}
    try:
        event = jsonfile.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{event_path}: cannot read the GitHub event file ({error})") from None
    return event if isinstance(event, dict) else {}


def pr_from_event(event_path: str | None) -> int | None:
    """The pull request number of the triggering event, if the event has one."""
    return _event_pr(read_event(event_path))


def _event_pr(event: Mapping[str, Any]) -> int | None:
    pull = event.get("pull_request")
    if isinstance(pull, dict) and isinstance(pull.get("number"), int):
        return int(pull["number"])
    issue = event.get("issue")  # issue_comment on a PR (e.g. a "/bitexact" command)
    if isinstance(issue, dict) and "pull_request" in issue and isinstance(issue.get("number"), int):
        return int(issue["number"])
    run = event.get("workflow_run")  # the privileged half of a fork-safe two-workflow setup
    pulls = run.get("pull_requests") if isinstance(run, dict) else None
    if pulls and isinstance(pulls[0], dict) and isinstance(pulls[0].get("number"), int):
        return int(pulls[0]["number"])
    return None


def announce(line: str) -> None:
    """A retry or wait, on stderr: stdout carries what later steps read (the comment URL)."""
    print(f"kl-bitexact: {line}", file=sys.stderr, flush=True)


HINTS = {
    401: "the token is invalid or expired: check the GITHUB_TOKEN given to this step",
    403: "the token lacks a permission: the publish job needs `pull-requests: write`, "
    "`statuses: write`, `actions: read` and `issues: read`; on a pull request from a fork the "
    "token is read-only, so publish from a `workflow_run` workflow",
    404: "check the repository and number, and that the token can see the repository",
}


# What reading fields off an answer of the wrong JSON type raises (see `translated`); PyGithub's
# typed attributes raise its BadAttributeException too (a label that is a string).
_WRONG_SHAPE = (TypeError, AttributeError, KeyError, IndexError, ValueError)
# Where the words for a library's errors are: none of its errors can exist before it is
# imported, so a command that never used it never loads them (`_described`).
_LIBRARY_WORDS = (
    ("github", "kl_bitexact.publish.pygithub_client"),
    ("requests", "kl_bitexact.publish.blob"),
    ("urllib3", "kl_bitexact.publish.blob"),
)


def shaped(value: Any, kind: type, doing: str) -> Any:
    """`value` when it is a `kind` (dict, list), else the error `translated` gives."""
    if not isinstance(value, kind):
        raise TypeError(f"{type(value).__name__} while {doing}")
    return value


Words = tuple[str, str | None]


def answered(doing: str, status: int, reason: str) -> Words:
    return f"GitHub answered {status} while {doing}: {reason}", HINTS.get(status)


def rate_limit_far(doing: str, wait: str) -> Words:
    """A primary rate limit whose reset is further off than we wait."""
    return (
        f"GitHub rate limit reached while {doing}; it resets in {wait}",
        "re-run the job after the reset, or raise KL_BITEXACT_GITHUB_MAX_RATE_WAIT",
    )


def rate_limited(doing: str, reason: str) -> Words:
    """Still limited after every retry."""
    return f"GitHub rate limit while {doing}: {reason}", "re-run the job in a few minutes"


def unreachable(doing: str, reason: str) -> Words:
    return (
        f"GitHub unreachable while {doing}: {reason}",
        "check GITHUB_API_URL and the network; retries were exhausted",
    )


def wrong_shape(doing: str, what: str) -> Words:
    """A 200 whose body is a string, or a list where an object belongs: only a proxy or a
    broken GitHub answers so."""
    return (
        f"GitHub answered something other than its API describes while {doing} ({what})",
        "check GITHUB_API_URL: it must be the REST API root (a proxy in between?)",
    )


class Trouble(Exception):
    """A failure of talking to GitHub, worded (`words(doing)`) once `Session.translated`
    knows what was being done; raised by the REST reader (`rest.py`). `status`: GitHub's
    answer, when the failure is one (a caller may read a 404 as "no such commit")."""

    def __init__(self, words: Callable[[str], Words], status: int | None = None) -> None:
        super().__init__("a failure of talking to GitHub (see Session.translated)")
        self.words, self.status = words, status


def _described(error: Exception, doing: str) -> Words | None:
    """What went wrong while `doing`, and what to do about it; None: not a failure of
    talking to GitHub (`Session.translated` lets it through)."""
    if isinstance(error, Trouble):
        return error.words(doing)
    for library, words in _LIBRARY_WORDS:
        if library in sys.modules:
            found = importlib.import_module(words).described(error, doing)
            if found is not None:
                return cast("Words", found)
    if isinstance(error, _WRONG_SHAPE):
        return wrong_shape(doing, type(error).__name__)
    return None


def open_session(
    env: Mapping[str, str],
    *,
    settings: ClientSettings | None = None,
    repository: str | None = None,
    pr_number: int | None = None,
    api_url: str | None = None,
    head_sha: str | None = None,
) -> Session:
    """The session a command opens: the token from GITHUB_TOKEN (asked for first), where to
    talk to from the options and the environment (`resolve_target`)."""
    token = env.get("GITHUB_TOKEN")
    if not token:
        raise ConfigError(
            "no GitHub token: set GITHUB_TOKEN",
            hint="in a workflow: env: GITHUB_TOKEN: ${{ github.token }} on the publish step",
        )
    target = resolve_target(
        env, repository=repository, pr_number=pr_number, api_url=api_url, head_sha=head_sha
    )
    return connect(target, token, settings)


def connect(target: Target, token: str, settings: ClientSettings | None = None) -> Session:
    """The session with `target`, authenticated with `token`: its clients (PyGithub's, the
    REST reader) are built when first used."""
    return Session(target, settings or ClientSettings(), token)


@dataclass(frozen=True, eq=False)
class Session:
    """One conversation with GitHub: where (`target`), how (`settings`), and the token, held
    here and by the two clients built from it alone, so that every error this session
    translates is scrubbed of it: the PyGithub `client` (writes, and what the baseline and
    blockers read) and the REST reader `rest` (the history's listing: issue 40), each built
    when first used."""

    target: Target
    settings: ClientSettings
    _token: str = field(repr=False)

    @cached_property
    def client(self) -> Github:
        from kl_bitexact.publish.pygithub_client import github_client

        return github_client(self.target.api_url, self._token, self.settings)

    @cached_property
    def rest(self) -> Rest:
        from kl_bitexact.publish.rest import Rest

        return Rest(self.target.api_url, self._token, self.settings)

    @contextmanager
    def translated(self, doing: str) -> Iterator[None]:
        """Re-raise failures of talking to GitHub (PyGithub's, the network's, the REST
        reader's) as GitHubError saying what we were doing."""
        try:
            yield
        except Exception as error:
            words = _described(error, doing)
            if words is None:
                raise
            message, hint = words
            raise GitHubError(self.redact(message), hint=hint) from None

    def redact(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def close(self) -> None:
        built = vars(self)  # the clients built so far (cached_property keeps them here)
        for name in ("client", "rest"):
            if name in built:
                built[name].close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

"""The one place that builds the PyGithub client, and the one that turns its errors into ours.

Where to talk to (API URL, repository, pull request) comes from options first, then the
environment GitHub Actions sets (`GITHUB_API_URL`, `GITHUB_REPOSITORY`, the event file), so
GitHub Enterprise Server works unchanged. Retries: 5xx with exponential backoff, secondary
rate limits after `Retry-After`, the primary rate limit by waiting for its reset when that is
short and failing clearly when it is not. The token never appears in a message: errors are
rebuilt from status and GitHub's `message` field, and every message is scrubbed once more.

The token lives in one object, `Session` (built by `open_session` or `connect`): the client it
authenticates, the target it talks to, and the redaction of its errors. Nothing else holds it.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import requests
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import (
    BadAttributeException,
    RateLimitExceededExceedsMaxWait,
    RateLimitExceededException,
)
from requests.adapters import HTTPAdapter
from urllib3 import Retry
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, ResponseError

from kl_bitexact.errors import ConfigError, GitHubError, network_reason
from kl_bitexact.results.commit import FULL_SHA, payload_head
from kl_bitexact.untrusted import jsonfile

DEFAULT_API_URL = "https://api.github.com"

# PyGithub sets its logger to INFO with a stderr handler when imported, and its retry logs
# every 403 there: publish printed "Request GET /user failed with 403" on every success
# (GET /user is how it tells an installation token, which is refused it). What we retry
# and wait for is announced by us (`announce`); PyGithub keeps its warnings.
logging.getLogger("github").setLevel(logging.WARNING)
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


def _say_why_and_wait(retry: Retry, response: Any) -> None:
    """Before urllib3 sleeps for a retry: what went wrong and how long it waits (issue 20:
    a refused connection was 31 s of silence before "unreachable")."""
    delay: float | None = None
    if retry.respect_retry_after_header and response is not None:
        delay = retry.get_retry_after(response)
    if delay is None:
        delay = retry.get_backoff_time()
    last = retry.history[-1] if retry.history else None
    why = "failed"
    if last is not None:
        why = f"answered {last.status}" if last.status else "unreachable"
        why += " (rate limit)" if last.status in (403, 429) else ""
        why += "" if last.status else f" ({network_reason(last.error)})"
        why += f" for {last.method} {urlsplit(last.url or '').path}"
    done = len(retry.history)
    of = f" (retry {done} of {done + retry.total})" if isinstance(retry.total, int) else ""
    wait = f"{delay:.1f} s" if delay < 10 else f"{delay:.0f} s"
    announce(f"GitHub {why}; retrying in {wait}{of}")


# POST .../issues/{n}/comments: creates a comment every time it takes effect.
_CREATES_COMMENT = re.compile(r"/issues/\d+/comments(?:\?|$)")


class _AnnouncedGithubRetry(GithubRetry):
    """GithubRetry that says why it waits, and gives a 5xx answer to a comment's creation
    back to the caller instead of posting again.

    A 502 from a proxy can come after GitHub created the comment (a "ghost" 502): the
    blind retry posted it again, four comments for one (issue 14, case 9). The caller
    (`sticky.upsert`) looks at the comments before it posts again. A status posted twice
    is harmless, so other POSTs keep their retries.
    """

    def sleep(self, response: Any = None) -> None:
        _say_why_and_wait(self, response)
        super().sleep(response)

    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Retry:
        status = getattr(response, "status", 0) or 0
        if method == "POST" and status >= 500 and _CREATES_COMMENT.search(url or ""):
            # With raise_on_status=False, urllib3 hands the response itself to PyGithub.
            raise MaxRetryError(_pool, url or "", ResponseError(f"{status}: not retried"))
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _AnnouncedRetry(Retry):
    def sleep(self, response: Any = None) -> None:
        _say_why_and_wait(self, response)
        super().sleep(response)


def blob_session(settings: ClientSettings | None = None) -> requests.Session:
    """A plain session for pre-signed download URLs (artifact blobs): retries on 5xx and
    connection errors, and no token - the URL carries its own short-lived signature."""
    settings = settings or ClientSettings()
    retry = _AnnouncedRetry(
        total=settings.retries,
        backoff_factor=settings.backoff_factor,
        status_forcelist=range(500, 600),
        raise_on_status=False,
    )
    session = requests.Session()
    session.mount("https://", HTTPAdapter(max_retries=retry))
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


_HINTS = {
    401: "the token is invalid or expired: check the GITHUB_TOKEN given to this step",
    403: "the token lacks a permission: the publish job needs `pull-requests: write`, "
    "`statuses: write`, `actions: read` and `issues: read`; on a pull request from a fork the "
    "token is read-only, so publish from a `workflow_run` workflow",
    404: "check the repository and number, and that the token can see the repository",
}


# What reading fields off an answer of the wrong JSON type raises (see `translated`);
# PyGithub's typed attributes raise BadAttributeException (a label that is a string).
_WRONG_SHAPE = (TypeError, AttributeError, KeyError, IndexError, ValueError, BadAttributeException)


def shaped(value: Any, kind: type, doing: str) -> Any:
    """`value` when it is a `kind` (dict, list), else the error `translated` gives."""
    if not isinstance(value, kind):
        raise TypeError(f"{type(value).__name__} while {doing}")
    return value


def _reason(error: GithubException) -> str:
    data = error.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return "no message"


def _described(error: Exception, doing: str) -> tuple[str, str | None]:
    """What went wrong while `doing`, and what to do about it (`Session.translated`)."""
    if isinstance(error, RateLimitExceededExceedsMaxWait):
        wait = f"{error.wait:.0f} s" if error.wait is not None else "too long"
        return (
            f"GitHub rate limit reached while {doing}; it resets in {wait}",
            "re-run the job after the reset, or raise KL_BITEXACT_GITHUB_MAX_RATE_WAIT",
        )
    if isinstance(error, RateLimitExceededException):  # still limited after every retry
        return (
            f"GitHub rate limit while {doing}: {_reason(error)}",
            "re-run the job in a few minutes",
        )
    if isinstance(error, GithubException):
        return f"GitHub answered {error.status} while {doing}: {_reason(error)}", _HINTS.get(
            error.status
        )
    if isinstance(error, requests.HTTPError):  # a plain download (artifact blob) refused
        status = error.response.status_code if error.response is not None else "an error"
        return f"the download answered {status} while {doing}", None
    if isinstance(error, (requests.RequestException, Urllib3Error)):
        return (
            f"GitHub unreachable while {doing}: {network_reason(error)}",
            "check GITHUB_API_URL and the network; retries were exhausted",
        )
    # A 200 whose body is a string, or a list where an object belongs: PyGithub reads
    # fields off it and fails with _WRONG_SHAPE. Only a proxy or a broken GitHub answers so.
    return (
        f"GitHub answered something other than its API describes while {doing} "
        f"({type(error).__name__})",
        "check GITHUB_API_URL: it must be the REST API root (a proxy in between?)",
    )


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
    """The session with `target`: a PyGithub client, lazy (objects are fetched only when a
    field is read), authenticated with `token`."""
    settings = settings or ClientSettings()
    retry = _AnnouncedGithubRetry(
        total=settings.retries,
        backoff_factor=settings.backoff_factor,
        max_rate_limit_wait=settings.max_rate_limit_wait_s,
        secondary_rate_wait=settings.secondary_rate_wait_s,
        # GithubRetry adds 403 and reads its body; secondary limits may also come as 429.
        status_forcelist=[*range(500, 600), 429],
        # PATCH and DELETE are idempotent; POST is retried too (GithubRetry's default),
        # but for a 5xx to a comment's creation, which the sticky comment looks into.
        allowed_methods=frozenset({"GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"}),
        raise_on_status=False,  # after the last retry, PyGithub sees the real error
    )
    client = Github(
        auth=Auth.Token(token),
        base_url=target.api_url,
        timeout=settings.timeout_s,
        retry=retry,
        per_page=PER_PAGE,
        lazy=True,
        seconds_between_requests=settings.seconds_between_requests or None,
        seconds_between_writes=settings.seconds_between_writes or None,
    )
    return Session(target, client, token)


@dataclass(frozen=True, eq=False)
class Session:
    """One conversation with GitHub: where (`target`), the PyGithub `client`, and the token,
    held here alone so that every error this session translates is scrubbed of it."""

    target: Target
    client: Github
    _token: str = field(repr=False)

    @contextmanager
    def translated(self, doing: str) -> Iterator[None]:
        """Re-raise PyGithub and network errors as GitHubError saying what we were doing."""
        try:
            yield
        except (GithubException, requests.RequestException, Urllib3Error, *_WRONG_SHAPE) as error:
            message, hint = _described(error, doing)
            raise GitHubError(self.redact(message), hint=hint) from None

    def redact(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

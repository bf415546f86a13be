"""The PyGithub client a `Session` builds when first asked, and the words for its errors:
PyGithub with requests and urllib3 is ~170 modules, loaded only by commands that write to
GitHub or read what the REST reader does not."""

from __future__ import annotations

import logging
import re
from typing import Any

from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import (
    BadAttributeException,
    RateLimitExceededExceedsMaxWait,
    RateLimitExceededException,
)
from urllib3 import Retry
from urllib3.exceptions import MaxRetryError, ResponseError

from kl_bitexact.publish.blob import say_why_and_wait
from kl_bitexact.publish.client import (
    PER_PAGE,
    ClientSettings,
    Words,
    answered,
    rate_limit_far,
    rate_limited,
    wrong_shape,
)

# PyGithub sets its logger to INFO with a stderr handler when imported, and its retry logs
# every 403 there: publish printed "Request GET /user failed with 403" on every success
# (GET /user is how it tells an installation token, which is refused it). What we retry
# and wait for is announced by us (`announce`); PyGithub keeps its warnings.
logging.getLogger("github").setLevel(logging.WARNING)


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
        say_why_and_wait(self, response)
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


def github_client(api_url: str, token: str, settings: ClientSettings) -> Github:
    """A PyGithub client, lazy (objects are fetched only when a field is read)."""
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
    return Github(
        auth=Auth.Token(token),
        base_url=api_url,
        timeout=settings.timeout_s,
        retry=retry,
        per_page=PER_PAGE,
        lazy=True,
        seconds_between_requests=settings.seconds_between_requests or None,
        seconds_between_writes=settings.seconds_between_writes or None,
    )


def _reason(error: GithubException) -> str:
    data = error.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return "no message"


def described(error: Exception, doing: str) -> Words | None:
    """An error of PyGithub in our words; None for any other (requests' and urllib3's:
    `blob.described`)."""
    if isinstance(error, RateLimitExceededExceedsMaxWait):
        wait = f"{error.wait:.0f} s" if error.wait is not None else "too long"
        return rate_limit_far(doing, wait)
    if isinstance(error, RateLimitExceededException):  # still limited after every retry
        return rate_limited(doing, _reason(error))
    if isinstance(error, GithubException):
        return answered(doing, error.status, _reason(error))
    if isinstance(error, BadAttributeException):  # PyGithub read a field of the wrong type
        return wrong_shape(doing, type(error).__name__)
    return None

"""Artifact archives from blob storage, over requests, with no token; and how urllib3's
retries announce themselves (PyGithub's client retries through urllib3 too). Apart from
`pygithub_client.py` so that downloading a history's archives does not import PyGithub.

A download may have a deadline (the history's: `--history-timeout`), an instant on the
monotonic clock that holds inside the download, not only between downloads: each connect
and read waits at most what is left of it, no retry starts or sleeps past it, and a read
still blocked when it passes is cut (`cut_at`): a server or proxy that trickles a byte
just inside each read's timeout would otherwise keep one download going for hours."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import Retry, Timeout
from urllib3.exceptions import HTTPError as Urllib3Error

from kl_bitexact.errors import network_reason
from kl_bitexact.publish.client import ClientSettings, Words, announce, unreachable

# The longest one connect or read of a blob waits for the server.
READ_TIMEOUT_S = 60.0
# What a connect or read past the deadline is given: at once, not never (0 would make the
# socket non-blocking, None would wait for ever).
_SPENT_S = 0.01


def left(deadline: float) -> float:
    """How long the next connect or read may wait: `READ_TIMEOUT_S`, or less when the
    deadline is nearer."""
    return min(READ_TIMEOUT_S, max(deadline - time.monotonic(), _SPENT_S))


def passed(deadline: float | None) -> bool:
    """The deadline (an instant on the monotonic clock) has come; never when there is none."""
    return deadline is not None and time.monotonic() >= deadline


def say_why_and_wait(retry: Retry, response: Any, deadline: float | None = None) -> float:
    """Before urllib3 sleeps for a retry: what went wrong and how long it waits (issue 20:
    a refused connection was 31 s of silence before "unreachable"); that wait, shortened to
    what is left of `deadline`."""
    delay: float | None = None
    if retry.respect_retry_after_header and response is not None:
        delay = retry.get_retry_after(response)
    if delay is None:
        delay = retry.get_backoff_time()
    delay = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0.0))
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
    return delay


class _AnnouncedRetry(Retry):
    """Says why it waits; with a deadline, neither waits nor retries past it."""

    deadline: float | None = None

    def new(self, **changes: Any) -> _AnnouncedRetry:
        retry = super().new(**changes)
        retry.deadline = self.deadline
        return retry

    def is_exhausted(self) -> bool:
        return passed(self.deadline) or super().is_exhausted()

    def sleep(self, response: Any = None) -> None:
        if self.deadline is None:
            say_why_and_wait(self, response)
            super().sleep(response)
        else:
            time.sleep(say_why_and_wait(self, response, self.deadline))


class _UntilDeadline(Timeout):
    """Each connect and read (of the headers; `cut_at` bounds the body) waits at most what
    is left of the deadline when urllib3 starts it: a retry gets what is left then."""

    def __init__(self, deadline: float) -> None:
        super().__init__(connect=READ_TIMEOUT_S, read=READ_TIMEOUT_S)
        self.deadline = deadline

    def clone(self) -> _UntilDeadline:
        return _UntilDeadline(self.deadline)

    @property
    def connect_timeout(self) -> float:
        return left(self.deadline)

    @property
    def read_timeout(self) -> float:
        return left(self.deadline)


@contextlib.contextmanager
def streamed(location: str, deadline: float | None = None) -> Iterator[requests.Response]:
    """The answer to a GET of `location`, its body not read yet: no token, retries, each
    connect and read waiting at most `READ_TIMEOUT_S` and what is left of `deadline`."""
    # requests hands a urllib3 Timeout to urllib3 as it is; its stubs know only numbers.
    timeout: Any = READ_TIMEOUT_S if deadline is None else _UntilDeadline(deadline)
    with (
        blob_session(deadline=deadline) as session,
        session.get(location, stream=True, timeout=timeout) as answer,
    ):
        yield answer


@contextlib.contextmanager
def cut_at(deadline: float | None, answer: requests.Response) -> Iterator[None]:
    """Within the block, a read of `answer`'s body still blocked when `deadline` passes
    returns (its socket is shut for reading): a read's timeout counts from the last byte, so
    a byte now and then would keep it, and the check between chunks, waiting."""
    if deadline is None:
        yield
        return
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), _shut, (answer,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


def _shut(answer: requests.Response) -> None:
    # Raises once the response let go of its connection (it is done reading then).
    with contextlib.suppress(ValueError, RuntimeError, OSError):
        answer.raw.shutdown()


def blob_session(
    settings: ClientSettings | None = None, deadline: float | None = None
) -> requests.Session:
    """A plain session for pre-signed download URLs (artifact blobs): retries on 5xx and
    connection errors, none past `deadline`, and no token - the URL carries its own
    short-lived signature."""
    settings = settings or ClientSettings()
    retry = _AnnouncedRetry(
        total=settings.retries,
        backoff_factor=settings.backoff_factor,
        status_forcelist=range(500, 600),
        raise_on_status=False,
    )
    retry.deadline = deadline
    session = requests.Session()
    session.mount("https://", HTTPAdapter(max_retries=retry))
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


def described(error: Exception, doing: str) -> Words | None:
    """An error of requests or urllib3 in our words; None for any other."""
    if isinstance(error, requests.HTTPError):  # a plain download (artifact blob) refused
        status = error.response.status_code if error.response is not None else "an error"
        return f"the download answered {status} while {doing}", None
    if isinstance(error, (requests.RequestException, Urllib3Error)):
        return unreachable(doing, network_reason(error))
    return None

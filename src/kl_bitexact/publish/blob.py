"""Artifact archives from blob storage, over requests, with no token; and how urllib3's
retries announce themselves (PyGithub's client retries through urllib3 too). Apart from
`pygithub_client.py` so that downloading a history's archives does not import PyGithub."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import Retry
from urllib3.exceptions import HTTPError as Urllib3Error

from kl_bitexact.errors import network_reason
from kl_bitexact.publish.client import ClientSettings, Words, announce, unreachable


def say_why_and_wait(retry: Retry, response: Any) -> None:
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


class _AnnouncedRetry(Retry):
    def sleep(self, response: Any = None) -> None:
        say_why_and_wait(self, response)
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


def described(error: Exception, doing: str) -> Words | None:
    """An error of requests or urllib3 in our words; None for any other."""
    if isinstance(error, requests.HTTPError):  # a plain download (artifact blob) refused
        status = error.response.status_code if error.response is not None else "an error"
        return f"the download answered {status} while {doing}", None
    if isinstance(error, (requests.RequestException, Urllib3Error)):
        return unreachable(doing, network_reason(error))
    return None

"""GitHub's REST API read over http.client: what a history fetch lists (issue 40).

PyGithub with requests and urllib3 is ~170 modules, most of a warm history fetch's CPU; the
history reads four kinds of list (a workflow's runs, the repository's artifacts of one name,
a run's artifacts, a branch's commits), one comparison and one redirect, which this reader
asks itself, on one kept-alive connection.

The token goes to the API's own origin (scheme, host and port of GITHUB_API_URL) and
nowhere else: a URL from an answer (a `Link` page, an artifact's `archive_download_url`, a
redirect) on any other origin is refused, never requested; a redirect is followed only
within the origin, and an artifact's archive redirect is handed back unfollowed (the blob is
fetched with no token: `baseline_fetch.download`). Failures are `Trouble`, worded by
`Session.translated` (status and GitHub's `message`, scrubbed of the token); retries, rate
limits and pacing follow `ClientSettings` as the PyGithub client's do.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urljoin, urlsplit

from kl_bitexact.errors import ConfigError, network_reason
from kl_bitexact.publish.client import (
    PER_PAGE,
    ClientSettings,
    Trouble,
    announce,
    answered,
    rate_limit_far,
    rate_limited,
    unreachable,
    wrong_shape,
)

# One answer's body at most: a page of 100 workflow runs is about 1 MB.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_REDIRECTS = 3
BACKOFF_MAX_S = 120.0
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_RATE_LIMIT_STATUSES = (403, 429)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def message(self) -> str:
        """GitHub's `message` field, or "no message"."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return "no message"
        found = document.get("message") if isinstance(document, dict) else None
        return found if isinstance(found, str) else "no message"


class Rest:
    """GETs below one API root, with the token, on one connection."""

    def __init__(self, api_url: str, token: str, settings: ClientSettings) -> None:
        parts = urlsplit(api_url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ConfigError(
                f"GitHub API URL {api_url!r} is not an http:// or https:// URL",
                hint="set GITHUB_API_URL to the REST API root, e.g. https://api.github.com",
            )
        self.origin = _origin(api_url)
        self.root = parts.path.rstrip("/")
        self.settings = settings
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "kl-bitexact",
        }
        self._connection: http.client.HTTPConnection | None = None
        self._last_request = 0.0

    def __repr__(self) -> str:  # never the headers: they hold the token
        return f"Rest({self.origin[0]}://{self.origin[1]}:{self.origin[2]}{self.root})"

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """The JSON GitHub answers to GET `path` (below the API root)."""
        return self._json(self._target(path, params))[0]

    def pages(
        self, path: str, params: Mapping[str, str], key: str | None, limit: int
    ) -> Iterator[Any]:
        """The items of a paged list (`key`: the field holding them; None: the answer
        itself), at most `limit`, page after page as GitHub links them (`rel="next"`)."""
        target: str | None = self._target(path, {**params, "per_page": str(PER_PAGE)})
        count = 0
        while target is not None and count < limit:
            document, headers = self._json(target)
            items = document.get(key) if key and isinstance(document, dict) else document
            if not isinstance(items, list):
                raise Trouble(lambda doing: wrong_shape(doing, f"no list of {key or 'items'}"))
            yield from items[: limit - count]
            count += len(items)
            target = self._next(headers.get("link", ""))

    def redirect(self, url: str) -> str:
        """Where GET `url` redirects to, unfollowed (an artifact's archive: short-lived
        blob storage, whose URL carries its own signature and gets no token)."""
        answer = self._send(self._own(url))
        location = answer.headers.get("location")
        if answer.status not in _REDIRECTS or not location:
            self._raise_for(answer)
            raise Trouble(lambda doing: (f"GitHub gave no download location while {doing}", None))
        return urljoin(url, location)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # --- one request ----------------------------------------------------------------

    def _json(self, target: str) -> tuple[Any, Mapping[str, str]]:
        answer = self._send(target)
        for _ in range(MAX_REDIRECTS):
            if answer.status not in _REDIRECTS or "location" not in answer.headers:
                break
            location = urljoin(self._url(target), answer.headers["location"])
            target = self._own(location)  # within the API's origin, or refused
            answer = self._send(target)
        self._raise_for(answer)
        try:
            return json.loads(answer.body), answer.headers
        except ValueError:
            raise Trouble(lambda doing: wrong_shape(doing, "not JSON")) from None

    def _raise_for(self, answer: Answer) -> None:
        if answer.status < 300:
            return
        status, reason = answer.status, answer.message()
        if _rate_limited(answer):
            raise Trouble(lambda doing: rate_limited(doing, reason), status)
        raise Trouble(lambda doing: answered(doing, status, reason), status)

    def _send(self, target: str) -> Answer:
        """One GET, retried as the settings say (5xx, unreachable, rate limits)."""
        attempt = 0
        while True:
            self._pace()
            try:
                answer = self._exchange(target)
            except (OSError, http.client.HTTPException) as error:
                if attempt >= self.settings.retries:
                    raise _unreachable(network_reason(error)) from None
                wait = _backoff(self.settings.backoff_factor, attempt + 1)
                why = f"unreachable ({network_reason(error)})"
            else:
                found = self._wait(answer, attempt)
                if found is None:
                    return answer
                wait = found
                why = f"answered {answer.status}" + (" (rate limit)" * _rate_limited(answer))
            attempt += 1
            self._announce(why, target, wait, attempt)
            time.sleep(wait)

    def _wait(self, answer: Answer, attempt: int) -> float | None:
        """Seconds to wait before asking again; None: this answer stands."""
        limited = _rate_limited(answer)
        if (not limited and answer.status < 500) or attempt >= self.settings.retries:
            return None
        if not limited:
            return _backoff(self.settings.backoff_factor, attempt + 1)
        after = _number(answer.headers.get("retry-after"))
        if after is not None:
            return after
        reset = _number(answer.headers.get("x-ratelimit-reset"))
        if answer.headers.get("x-ratelimit-remaining") == "0" and reset is not None:
            wait = max(0.0, reset - time.time())
            if wait > self.settings.max_rate_limit_wait_s:
                raise Trouble(lambda doing: rate_limit_far(doing, f"{wait:.0f} s"))
            return wait
        return self.settings.secondary_rate_wait_s

    def _announce(self, why: str, target: str, wait: float, attempt: int) -> None:
        shown = f"{wait:.1f} s" if wait < 10 else f"{wait:.0f} s"
        path = urlsplit(target).path
        of = f"(retry {attempt} of {self.settings.retries})"
        announce(f"GitHub {why} for GET {path}; retrying in {shown} {of}")

    def _pace(self) -> None:
        """At most one request per `seconds_between_requests`, as PyGithub paces."""
        gap = self.settings.seconds_between_requests - (time.monotonic() - self._last_request)
        if gap > 0:
            time.sleep(gap)
        self._last_request = time.monotonic()

    def _exchange(self, target: str) -> Answer:
        connection = self._connection or self._connect()
        self._connection = connection
        try:
            connection.request("GET", self._request_target(target), headers=self._headers)
            response = connection.getresponse()
            body = response.read(MAX_BODY_BYTES + 1)
        except BaseException:
            self.close()
            raise
        headers = {name.lower(): value for name, value in response.getheaders()}
        if len(body) > MAX_BODY_BYTES or response.will_close or not response.isclosed():
            self.close()  # an answer not read to its end leaves the connection unusable
        if len(body) > MAX_BODY_BYTES:
            raise Trouble(lambda doing: wrong_shape(doing, f"over {MAX_BODY_BYTES} bytes"))
        return Answer(response.status, headers, body)

    # --- where ----------------------------------------------------------------------

    def _target(self, path: str, params: Mapping[str, str] | None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self.root}{path}{query}"

    def _url(self, target: str) -> str:
        scheme, host, port = self.origin
        return f"{scheme}://{host}:{port}{target}"

    def _own(self, url: str) -> str:
        """`url`'s path and query when it is on the API's origin; refused otherwise: the
        token is sent to no other host."""
        if _origin(url) != self.origin:
            where = urlsplit(url).hostname or url
            raise Trouble(
                lambda doing: (
                    f"GitHub pointed to another host ({where}) while {doing}: not followed, "
                    "the token goes to the API's host alone",
                    "check GITHUB_API_URL: it must be the REST API root (a proxy in between?)",
                )
            )
        parts = urlsplit(url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def _next(self, link: str) -> str | None:
        for part in link.split(","):
            url, _, relation = part.partition(";")
            if relation.strip().replace(" ", "") == 'rel="next"':
                return self._own(url.strip().strip("<>"))
        return None

    # --- the connection, through a proxy when the environment names one ----------

    def _connect(self) -> http.client.HTTPConnection:
        scheme, host, port = self.origin
        proxy = _proxy(scheme, host)
        kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        if proxy is None:
            return kind(host, port, timeout=self.settings.timeout_s)
        parts = urlsplit(proxy)
        where = (parts.hostname or "", parts.port or _DEFAULT_PORTS.get(parts.scheme, 80))
        headers = _proxy_headers(parts.username, parts.password)
        if scheme == "http":  # absolute-form targets (`_request_target`)
            self._headers |= headers
            return http.client.HTTPConnection(*where, timeout=self.settings.timeout_s)
        connection = kind(*where, timeout=self.settings.timeout_s)
        connection.set_tunnel(host, port, headers=headers)
        return connection

    def _request_target(self, target: str) -> str:
        scheme, host, _ = self.origin
        if scheme == "http" and _proxy(scheme, host) is not None:
            return self._url(target)
        return target


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:  # a port that is not a number
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def _proxy(scheme: str, host: str) -> str | None:
    """The proxy the environment names for `scheme` (as requests honours it), unless
    NO_PROXY lets `host` through; urllib.request only when some proxy is set."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None
    import urllib.request

    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies_environment().get(scheme)


def _proxy_headers(user: str | None, password: str | None) -> dict[str, str]:
    if user is None:
        return {}
    credentials = f"{unquote(user)}:{unquote(password or '')}".encode()
    return {"Proxy-Authorization": "Basic " + base64.b64encode(credentials).decode()}


def _unreachable(reason: str) -> Trouble:
    return Trouble(lambda doing: unreachable(doing, reason))


def _rate_limited(answer: Answer) -> bool:
    """A 429, or a 403 that is a rate limit (GitHub's primary or secondary), not a refusal."""
    if answer.status not in _RATE_LIMIT_STATUSES:
        return False
    headers = answer.headers
    return (
        answer.status == 429
        or headers.get("x-ratelimit-remaining") == "0"
        or "retry-after" in headers
        or "rate limit" in answer.message().lower()
    )


def _backoff(factor: float, retry: int) -> float:
    """urllib3's (so PyGithub's) exponential backoff: 0 s before the first retry."""
    return 0.0 if retry <= 1 else min(BACKOFF_MAX_S, factor * 2 ** (retry - 1))


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None

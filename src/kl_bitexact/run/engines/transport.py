"""HTTP for sglang's API: one kept-alive connection, each request bounded as a whole.

Python's own `http.client`, not requests: a run against sglang sends a dozen requests, and
importing requests (urllib3, charset detection, cookies, IDNA) cost more CPU than the whole
run's work (issue 40: 0.25 s of a 0.6 s run, where sglang's own helpers take 0.5 s in all).
Servers are reached directly (no HTTP proxy): they are the job's own, or a URL the suite
names.

The bound: a timeout on each read does not bound a request, since a server that trickles
one byte a second keeps every read quick (issue 30). So the exchange runs in a daemon
thread that the caller waits for at most `total_s`; past that the caller gets `Timeout`,
the connection is shut (which ends the abandoned thread's read) and the next request opens
a new one. An answer over `max_bytes` is refused. Being a daemon, an abandoned thread never
holds the process's exit.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kl_bitexact.errors import network_reason

# A batch of 64 prompts of 128k tokens with their logprobs is a few hundred megabytes.
MAX_ANSWER_BYTES = 1024 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
_CHUNK = 1024 * 1024
# What a kept-alive connection that the server closed while idle raises on reuse: the
# request never reached the server, so it is sent once more on a new connection.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class TransportError(Exception):
    """No complete answer: refused, unreachable, cut off, too large, or too slow."""


def reason(error: TransportError) -> str:
    """In a few words: the OS's ("Connection refused") where it gave any, else the message
    (an SSL error, a malformed answer)."""
    words = network_reason(error)
    return str(error) if words == type(error).__name__ else words


class Timeout(TransportError):
    """No complete answer within the request's total time."""


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer: its status and body."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (ValueError when it is not, RecursionError when nested too deep)."""
        return json.loads(self.body)


class Connection:
    """Requests to one server at a time, over one connection kept alive between them."""

    def __init__(self, *, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._open: http.client.HTTPConnection | None = None
        self._origin: tuple[str, str, int | None] | None = None

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        total_s: float,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> Answer:
        """`body` sent as JSON (None: no body); the whole answer within `total_s`, or Timeout."""
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        outcome: list[Answer | BaseException] = []
        limits = (total_s, max_bytes)
        connection = self._connection(url)

        def work() -> None:
            try:
                outcome.append(self._exchange(connection, method, url, data, limits))
            except BaseException as error:  # handed to the waiting thread, raised there
                outcome.append(error)

        worker = threading.Thread(target=work, name=f"http {method} {url}", daemon=True)
        worker.start()
        worker.join(total_s)
        if not outcome:
            self._drop(connection)  # its reader is stuck in a read: cut it off
            raise Timeout(f"no complete answer within {total_s:g} s")
        result = outcome[0]
        if isinstance(result, BaseException):
            self._drop(connection)
            raise result
        return result

    def close(self) -> None:
        if self._open is not None:
            self._drop(self._open)

    def _connection(self, url: str) -> http.client.HTTPConnection:
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname or "", parts.port)
        if self._open is not None and (origin != self._origin or _dropped(self._open)):
            self._drop(self._open)
        if self._open is None:
            self._open, self._origin = _new_connection(origin, self.connect_timeout_s), origin
        return self._open

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        url: str,
        data: bytes | None,
        limits: tuple[float, int],
    ) -> Answer:
        reused = connection.sock is not None
        try:
            return _exchange(connection, method, url, data, limits)
        except _STALE as error:
            if not reused:
                raise TransportError(_words(error)) from None
        connection.close()  # opened again below, as for a first request
        try:
            return _exchange(connection, method, url, data, limits)
        except _STALE as error:
            raise TransportError(_words(error)) from None

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        if connection is self._open:
            self._open = self._origin = None
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # wakes a thread blocked reading it
                sock.shutdown(socket.SHUT_RDWR)
        connection.close()


def _new_connection(
    origin: tuple[str, str, int | None], timeout_s: float
) -> http.client.HTTPConnection:
    scheme, host, port = origin
    if scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout_s)
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept-alive connection was closed by the server (readable while idle: the
    end of the stream, or bytes nobody asked for)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _exchange(
    connection: http.client.HTTPConnection,
    method: str,
    url: str,
    data: bytes | None,
    limits: tuple[float, int],
) -> Answer:
    """One request and its whole answer. `limits`: (seconds a read may wait, bytes)."""
    read_s, max_bytes = limits
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        if connection.sock is None:
            connection.connect()  # within the connect timeout the connection was made with
        assert connection.sock is not None
        connection.sock.settimeout(read_s)  # a computing server answers when it is done
        connection.request(method, target, body=data, headers=headers)
        response = connection.getresponse()
        body = _read(response, max_bytes)
    except _STALE:
        raise
    except TimeoutError as error:
        raise Timeout(f"timed out ({error})") from None
    except (OSError, http.client.HTTPException) as error:
        raise TransportError(_words(error)) from None
    if response.will_close:
        connection.close()
    return Answer(response.status, body)


def _read(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise TransportError(f"the answer is over {max_bytes} bytes; refused")
        chunks.append(chunk)
    return b"".join(chunks)


def _words(error: BaseException) -> str:
    """An OS error in its own words ("[Errno 111] Connection refused"), else its type too."""
    text = str(error)
    if isinstance(error, OSError) and error.errno is not None:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

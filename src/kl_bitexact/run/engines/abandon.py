"""A request its client abandons: sent on its own connection, then the client hangs up.

requests cannot hang up on a request it has sent, so this is a plain socket: the request is
written, the client waits `after_s`, then ends its side of the connection (a TCP FIN, what a
closed socket or a killed client sends) and waits - at most `wait_s` - for the server to be
done with it: a server that noticed the hang-up drops the connection without an answer; one
that did not answers anyway. Either way the server has finished with the request when this
returns (or `wait_s` has passed, which is said), so what it cached is in place for the next.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from kl_bitexact.errors import EngineError

if TYPE_CHECKING:
    from kl_bitexact.run.engines.base import SamplingParams

# Enough of an answer to tell one from none; the rest is read and dropped.
KEPT_ANSWER_BYTES = 4096


@dataclass(frozen=True)
class HungUp:
    """What the server did with a request whose client hung up."""

    # The server answered anyway (an HTTP status line came back): it ignored the hang-up or
    # had finished before it; False: it dropped the connection without an answer.
    answered: bool
    # The server was done (closed the connection) within the wait; False: the wait ran out.
    finished: bool
    waited_s: float
    status_line: str = ""


@runtime_checkable
class HangsUp(Protocol):
    """An adapter that can send a request and hang up on it (sglang's native API)."""

    def hang_up(
        self, prompt: Sequence[int], params: SamplingParams, *, after_s: float, wait_s: float
    ) -> HungUp:
        """Send one /generate of `prompt`, hang up after `after_s`, wait `wait_s` at most
        for the server to be done with it."""
        ...


def hang_up(
    base_url: str, path: str, body: Any, *, after_s: float, wait_s: float, connect_s: float
) -> HungUp:
    """POST `body` as JSON to `path`, hang up after `after_s`, wait for the server."""
    host, port = _address(base_url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection((host, port), timeout=connect_s) as connection:
            corked = after_s <= 0 and _cork(connection)
            connection.sendall(head + payload)
            time.sleep(after_s)
            connection.shutdown(socket.SHUT_WR)  # with the cork: the FIN rides on the data
            if corked:
                with contextlib.suppress(OSError):
                    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            return _await_end(connection, wait_s)
    except OSError as error:
        raise EngineError(f"{base_url}{path} (a request hung up on) failed: {error}") from None


def _cork(connection: socket.socket) -> bool:
    """Hold what is written until the hang-up (Linux's TCP_CORK), so the request's last
    bytes and the FIN leave together: otherwise a loaded machine may run the server on the
    request before the client, woken again, hangs up (measured: a niced client hung up
    after the first prefill chunk on some re-runs of one workload and not on others)."""
    cork = getattr(socket, "TCP_CORK", None)
    if cork is None:
        return False
    connection.setsockopt(socket.IPPROTO_TCP, cork, 1)
    return True


def _await_end(connection: socket.socket, wait_s: float) -> HungUp:
    started = time.monotonic()
    deadline = started + wait_s
    kept = b""
    while (left := deadline - time.monotonic()) > 0:
        connection.settimeout(left)
        try:
            data = connection.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            data = b""
        if not data:
            return _hung_up(kept, True, time.monotonic() - started)
        kept = (kept + data)[:KEPT_ANSWER_BYTES]
    return _hung_up(kept, False, time.monotonic() - started)


def _hung_up(kept: bytes, finished: bool, waited_s: float) -> HungUp:
    """An answer is a 200: an error status (sglang's abort answers one) is no answer."""
    line = kept.split(b"\r\n", 1)[0].decode("latin-1")
    answered = line.startswith("HTTP/") and line.split(" ")[1:2] == ["200"]
    return HungUp(answered, finished, waited_s, line[:200])


def _address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise EngineError(
            f"{base_url}: a request can be hung up on only over plain http://host:port",
            hint="point --base-url at the server's http address",
        )
    return parts.hostname, parts.port or 80

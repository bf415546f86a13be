"""sglang's HTTP (run/engines/transport.py) against real local servers: one kept-alive
connection, a server's closed connection survived, every request bounded in time and size."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kl_bitexact.run.engines import transport


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Counting

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        if self.path == "/drip":
            self._head(200, 100)
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
            return
        body = b"x" * 2000 if self.path == "/big" else b'{"ok": true}'
        self._head(200, len(body))
        self.wfile.write(body)
        if self.path == "/hang-up":  # kept alive as far as the client knows, then closed
            self.wfile.flush()
            self.close_connection = True

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.bodies.append(self.rfile.read(length))
        self._head(200, 2)
        self.wfile.write(b"{}")

    def _head(self, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.connections = 0
        self.paths: list[str] = []
        self.bodies: list[bytes] = []

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()


@pytest.fixture
def server() -> Iterator[Counting]:
    running = Counting()
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield running
    running.shutdown()
    running.server_close()


def url(server: Counting, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_requests_share_one_kept_alive_connection(server: Counting) -> None:
    connection = transport.Connection()
    for _ in range(3):
        assert connection.request("GET", url(server, "/a"), total_s=10).json() == {"ok": True}
    answer = connection.request("POST", url(server, "/generate"), {"input_ids": [[1]]}, total_s=10)
    assert answer.status == 200 and answer.json() == {}
    assert server.connections == 1
    assert server.bodies == [b'{"input_ids": [[1]]}']


def test_a_connection_the_server_closed_is_opened_again(server: Counting) -> None:
    connection = transport.Connection()
    connection.request("GET", url(server, "/hang-up"), total_s=10)
    time.sleep(0.2)  # the server has closed its end
    assert connection.request("GET", url(server, "/a"), total_s=10).json() == {"ok": True}
    assert server.paths == ["/hang-up", "/a"] and server.connections == 2


def test_a_dripping_answer_ends_at_the_total_time_and_the_next_request_goes_through(
    server: Counting,
) -> None:
    connection = transport.Connection()
    started = time.monotonic()
    with pytest.raises(transport.Timeout, match=r"no complete answer within 0\.5 s"):
        connection.request("GET", url(server, "/drip"), total_s=0.5)
    assert time.monotonic() - started < 3
    assert connection.request("GET", url(server, "/a"), total_s=10).json() == {"ok": True}


def test_an_answer_over_the_size_limit_is_refused(server: Counting) -> None:
    connection = transport.Connection()
    with pytest.raises(transport.TransportError, match="over 1000 bytes"):
        connection.request("GET", url(server, "/big"), total_s=10, max_bytes=1000)


def test_a_refused_connection_says_so_in_the_os_words() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(transport.TransportError, match="Connection refused"):
        transport.Connection().request("GET", f"http://127.0.0.1:{port}/health", total_s=5)


def test_a_tls_handshake_with_a_plain_server_is_said_in_its_own_words(server: Counting) -> None:
    from kl_bitexact.run.server import health_problem

    problem = health_problem(url(server, "").replace("http://", "https://"), 5)
    assert problem is not None and "SSL" in problem

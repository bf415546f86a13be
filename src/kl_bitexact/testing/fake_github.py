"""A local GitHub REST API on 127.0.0.1, checked against GitHub's own OpenAPI description.

Every API request and every answer is validated with openapi-core against
`api.github.com.json` from `@octokit/openapi`; a mismatch is answered with an error and
recorded under `violations`, so a test that talks to the fake cannot pass on a request the
real API would refuse. Injected faults (502s, rate limits) are answered as given and are
not checked: GitHub documents none of them per endpoint.

Run it standalone (tests/action/test_act_e2e.py drives it under `act`):

    python -m kl_bitexact.testing.fake_github --port 0 --token T [--seed seed.json] [--prefix P]

It prints `fake GitHub listening on http://127.0.0.1:PORT[P]` (the API base URL, what
GITHUB_API_URL should be) and serves, besides the API, at the server's root:
  GET  /_fake/state    what arrived: comments, statuses, requests, violations (JSON)
  POST /_fake/seed     add repositories, pulls, issues, comments, label events, runs
                        (the --seed format)
  POST /_fake/faults   [{"method", "path" (regex), "status", "body", "headers", "times",
                        "reset_in", "applied"}] answered instead of the next matching
                        requests (applied: after the request took effect)
  POST /_fake/holds    {"method", "path", "parties", "timeout"}: matching requests wait
                        until `parties` of them arrived (forces two publishers to race)

The seed format with an example, the control endpoints and what is validated against
GitHub's description: docs/fake-github.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kl_bitexact.testing.fake_routes import (
    BLOB_ROUTE,
    ROUTES,
    Answer,
    blob,
    decode_call,
    not_found,
)
from kl_bitexact.testing.fake_state import Fault, Hold, Stall, Trickle, World
from kl_bitexact.testing.openapi_check import Exchange, Reply, SpecChecker


class FakeGitHub(ThreadingHTTPServer):
    """The server: a World, a SpecChecker, and a request handler that joins them."""

    daemon_threads = True

    def __init__(
        self,
        token: str,
        port: int = 0,
        checker: SpecChecker | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.world = World(token)
        self.checker = checker or SpecChecker()
        # GitHub Enterprise Server serves the API under /api/v3.
        self.prefix = prefix.rstrip("/")
        self._thread: threading.Thread | None = None

    @property
    def root(self) -> str:
        """Where the control endpoints (/_fake/...) live."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def url(self) -> str:
        """The API base URL: what GITHUB_API_URL should be."""
        return self.root + self.prefix

    @property
    def blob_root(self) -> str:
        """Artifact downloads redirect here: another host name, as GitHub's blob storage is,
        so clients drop the Authorization header as they must."""
        return f"http://localhost:{self.server_address[1]}"

    def start(self) -> FakeGitHub:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def add_fault(self, fault: Fault) -> None:
        with self.world.lock:
            self.world.faults.append(fault)

    def hold(self, method: str, path: str, parties: int, timeout: float = 10.0) -> None:
        barrier = threading.Barrier(parties, timeout=timeout)
        with self.world.lock:
            self.world.holds.append(Hold(method, path, barrier))

    def stall(
        self, path: str, after_bytes: int, times: int = 1, timeout: float = 60.0
    ) -> threading.Event:
        """Blob downloads matching `path` (a regex) stop after `after_bytes` until the event
        returned is set (or `timeout` s pass): a download in progress, for as long as a test
        needs one."""
        release = threading.Event()
        with self.world.lock:
            self.world.stalls.append(Stall(path, after_bytes, release, times, timeout))
        return release

    def trickle(self, path: str, step: int, interval: float, times: int = 1) -> None:
        """Blob downloads matching `path` (a regex) arrive `step` bytes every `interval` s:
        each read gets a byte well within its timeout, and the whole takes as long as the
        archive's size says (until the client goes away)."""
        with self.world.lock:
            self.world.stalls.append(Trickle(path, step, interval, times))


class _Handler(BaseHTTPRequestHandler):
    server: FakeGitHub
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; under Nagle the body waited for the client's
    # delayed ACK, 40 ms on every keep-alive request after the first (GitHub does not).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: what arrived is in /_fake/state, not on stderr."""

    def _handle(self) -> None:
        try:
            self._dispatch()
        except Exception as error:  # a bug in the fake or a malformed control request
            self._send(
                self._violation(
                    f"fake GitHub failed on {self.command} {self.path}: "
                    f"{type(error).__name__}: {error}",
                    500,
                )
            )

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if parts.path.startswith("/_fake/"):
            answer = self._control(parts.path, raw)
            blob_sent = BLOB_ROUTE.match(parts.path) and answer.status == 200
            self._send(answer, self._take_stall(parts.path) if blob_sent else None)
            return
        prefix = self.server.prefix
        if not parts.path.startswith(prefix + "/"):
            self._send(not_found())
            return
        path = parts.path[len(prefix) :]
        answer = self._api(path, parts.query, raw)
        self._record(path, parts.query, answer.status)
        self._send(answer)

    # --- the API ------------------------------------------------------------------------

    def _api(self, path: str, query: str, raw: bytes) -> Answer:
        self._wait_for_hold(path)
        fault = self._take_fault(path)
        if fault is not None and not fault.applied:
            return _fault_answer(fault)
        answer = self._answer(path, query, raw)
        return answer if fault is None else _fault_answer(fault)

    def _answer(self, path: str, query: str, raw: bytes) -> Answer:
        world = self.server.world
        exchange = Exchange(self.command, path, query, list(self.headers.items()), raw or None)
        problems = self.server.checker.request_problems(exchange)
        if problems:
            return self._violation(f"request {self.command} {path}: {problems}", 422)
        if self._authorised():
            with world.lock:
                answer = self._route(path, query, raw)
        else:
            answer = Answer(
                401, {"message": "Bad credentials", "documentation_url": "https://docs"}
            )
        reply = Reply(answer.status, _json_headers(answer), _encode(answer))
        problems = self.server.checker.response_problems(exchange, reply)
        if problems:
            return self._violation(f"response to {self.command} {path}: {problems}", 500)
        return answer

    def _route(self, path: str, query: str, raw: bytes) -> Answer:
        call = decode_call(self.command, path, query, raw, self.server.url, self.server.blob_root)
        for method, pattern, handler in ROUTES:
            match = pattern.match(path)
            if method == self.command and match:
                return handler(self.server.world, call, match)
        self.server.world.violations.append(f"not implemented by the fake: {self.command} {path}")
        return not_found()

    def _authorised(self) -> bool:
        scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() in ("token", "bearer") and credential == self.server.world.token

    def _violation(self, message: str, status: int) -> Answer:
        with self.server.world.lock:
            self.server.world.violations.append(message)
        return Answer(status, {"message": f"fake GitHub: {message}", "documentation_url": ""})

    def _take_fault(self, path: str) -> Fault | None:
        world = self.server.world
        with world.lock:
            for fault in world.faults:
                if fault.method == self.command and re.search(fault.path, path):
                    fault.times -= 1
                    if fault.times <= 0:
                        world.faults.remove(fault)
                    return fault
        return None

    def _take_stall(self, path: str) -> Stall | Trickle | None:
        world = self.server.world
        with world.lock:
            for stall in world.stalls:
                if re.search(stall.path, path):
                    stall.times -= 1
                    if stall.times <= 0:
                        world.stalls.remove(stall)
                    return stall
        return None

    def _wait_for_hold(self, path: str) -> None:
        with self.server.world.lock:
            holds = [
                hold
                for hold in self.server.world.holds
                if hold.method == self.command and re.search(hold.path, path)
            ]
        for hold in holds:
            # A broken barrier means the other party never came: let the request through.
            with contextlib.suppress(threading.BrokenBarrierError):
                hold.barrier.wait()

    def _record(self, path: str, query: str, status: int) -> None:
        entry = {"method": self.command, "path": path, "query": query, "status": status}
        with self.server.world.lock:
            self.server.world.requests.append(entry)

    # --- control endpoints --------------------------------------------------------------

    def _control(self, path: str, raw: bytes) -> Answer:
        world = self.server.world
        match = BLOB_ROUTE.match(path)
        if match and self.command == "GET":
            if self.headers.get("Authorization"):
                self._violation("a token was sent to artifact blob storage", 400)
            fault = self._take_fault(path)
            if fault is not None:
                return _fault_answer(fault)
            with world.lock:
                return blob(
                    world,
                    decode_call("GET", path, "", b"", self.server.url, self.server.blob_root),
                    match,
                )
        if path == "/_fake/state" and self.command == "GET":
            return Answer(200, world.snapshot())
        document = json.loads(raw or b"null")
        if path == "/_fake/seed" and self.command == "POST":
            with world.lock:
                world.seed(document)
            return Answer(200, {"ok": True})
        if path == "/_fake/faults" and self.command == "POST":
            for item in document:
                self.server.add_fault(Fault(**item))
            return Answer(200, {"ok": True})
        if path == "/_fake/holds" and self.command == "POST":
            self.server.hold(**document)
            return Answer(200, {"ok": True})
        return not_found()

    def _send(self, answer: Answer, stall: Stall | Trickle | None = None) -> None:
        data = _encode(answer)
        self.send_response(answer.status)
        for name, value in _json_headers(answer).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if isinstance(stall, Trickle):
            self._send_trickled(data, stall)
        elif stall is not None:
            self._send_stalled(data, stall)
        else:
            self.wfile.write(data)

    def _send_stalled(self, data: bytes, stall: Stall) -> None:
        self.wfile.write(data[: stall.after_bytes])
        self.wfile.flush()
        stall.release.wait(stall.timeout)
        try:
            self.wfile.write(data[stall.after_bytes :])
        except (BrokenPipeError, ConnectionResetError):  # the client was killed meanwhile
            self.close_connection = True

    def _send_trickled(self, data: bytes, trickle: Trickle) -> None:
        try:
            for start in range(0, len(data), trickle.step):
                self.wfile.write(data[start : start + trickle.step])
                self.wfile.flush()
                time.sleep(trickle.interval)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up or was killed
            self.close_connection = True


def _fault_answer(fault: Fault) -> Answer:
    headers = dict(fault.headers)
    if fault.reset_in is not None:
        headers["X-RateLimit-Remaining"] = "0"
        headers["X-RateLimit-Reset"] = str(int(time.time() + fault.reset_in))
    return Answer(fault.status, fault.body, headers)


def _encode(answer: Answer) -> bytes:
    if answer.raw is not None:
        return answer.raw
    return b"" if answer.body is None else json.dumps(answer.body).encode()


def _json_headers(answer: Answer) -> dict[str, str]:
    headers = dict(answer.headers)
    if answer.raw is None and answer.body is not None:
        headers.setdefault("Content-Type", "application/json; charset=utf-8")
    return headers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kl_bitexact.testing.fake_github",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default="fake-token", help="the only token accepted")
    parser.add_argument(
        "--seed",
        type=Path,
        help='JSON file of what GitHub holds at start: {"repos": {"owner/name": {"pulls": '
        '[...], "issues": [...], "comments": [...], "events": [...], "runs": [...]}}} '
        "(docs/fake-github.md)",
    )
    parser.add_argument("--prefix", default="", help="API path prefix, e.g. /api/v3 (GHES)")
    args = parser.parse_args(argv)
    server = FakeGitHub(args.token, args.port, prefix=args.prefix)
    if args.seed:
        server.world.seed(json.loads(args.seed.read_text(encoding="utf-8")))
    print(f"fake GitHub listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

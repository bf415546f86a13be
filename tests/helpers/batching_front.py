"""A real HTTP front that batches concurrent requests, as a server's scheduler may (tests).

The reference engine serves concurrent requests one at a time, so the second of two that
share a prefix always reuses the first's. A real scheduler may instead put requests that
arrive together into one step, where neither can reuse the other. This front gives the
reference engine that scheduler: /generate requests of one prompt each are held until
`gather` of them have arrived (or `window_s` has passed) and go to the engine as one batch;
every other request is passed through as it is.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class _Pending:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.done = threading.Event()
        self.answer: bytes = b""
        self.status = 502


class BatchingFront(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, backend: str, gather: int, window_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.backend = urlsplit(backend)
        self.gather = gather
        self.window_s = window_s
        self.lock = threading.Lock()
        self.pending: list[_Pending] = []
        self.batches: list[int] = []  # the size of each batch sent on

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def forward(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(
            self.backend.hostname or "127.0.0.1", self.backend.port or 80, timeout=120
        )
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def hold(self, item: _Pending) -> None:
        """Hold `item` until its batch is full or the window has passed, then send the
        batch on (whichever request's wait ends first sends it)."""
        with self.lock:
            self.pending.append(item)
            full = len(self.pending) >= self.gather
        if full or not item.done.wait(self.window_s):
            self._send_batch()
        item.done.wait(120)

    def _send_batch(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        if not batch:
            return
        self.batches.append(len(batch))
        merged = dict(batch[0].body)
        merged["input_ids"] = [item.body["input_ids"][0] for item in batch]
        status, raw = self.forward("POST", "/generate", json.dumps(merged).encode())
        answers = json.loads(raw) if status == 200 else None
        for index, item in enumerate(batch):
            item.status = status
            item.answer = json.dumps([answers[index]]).encode() if answers else raw
            item.done.set()


class _Handler(BaseHTTPRequestHandler):
    server: BatchingFront
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(*self.server.forward("GET", self.path, None))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw) if raw else {}
        prompts = body.get("input_ids") if isinstance(body, dict) else None
        if self.path != "/generate" or not isinstance(prompts, list) or len(prompts) != 1:
            self._answer(*self.server.forward("POST", self.path, raw))
            return
        item = _Pending(body)
        self.server.hold(item)
        self._answer(item.status, item.answer)

    def _answer(self, status: int, raw: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@contextmanager
def batching_front(backend: str, gather: int, window_s: float = 5.0) -> Iterator[BatchingFront]:
    """The front on a free port, serving in a thread until the block ends."""
    front = BatchingFront(backend, gather, window_s)
    thread = threading.Thread(target=front.serve_forever, name="batching-front", daemon=True)
    thread.start()
    try:
        yield front
    finally:
        front.shutdown()
        front.server_close()
        thread.join(timeout=10)

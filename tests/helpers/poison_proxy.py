"""A cache fault provoked from outside llama-server (issue 31), for tests and the H200 run.

A proxy in front of server A: before every request allowed to hit the cache
(`cache_prompt: true`), server B computes the same prompt, its slot 0 is saved and restored
into A's slot 0 (`POST /slots/0?action=save|restore`; both servers share one
`--slot-save-path`, A runs one slot), so A resumes from KV it did not write. B serving
another model's weights is a gross fault; the same model under other flags (`-ub 1`) a
subtle one; A's own flags a control (identical KV). Every other request reaches A as sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

TIMEOUT_S = 120.0


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, a: str, b: str, filename: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.a, self.b, self.filename = a, b, filename
        self.lock = threading.Lock()
        self.poisoned = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def poison(self, prompt: Any) -> None:
        fill = {"prompt": prompt, "n_predict": 1, "temperature": 0.0, "cache_prompt": False}
        requests.post(self.b + "/completion", json=fill, timeout=TIMEOUT_S).raise_for_status()
        for server, action in ((self.b, "save"), (self.a, "restore")):
            path = f"/slots/0?action={action}"
            answer = requests.post(
                server + path, json={"filename": self.filename}, timeout=TIMEOUT_S
            )
            answer.raise_for_status()
        self.poisoned += 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET", None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = json.loads(body) if self.path == "/completion" else {}
        if isinstance(request, dict) and request.get("cache_prompt", True) and "prompt" in request:
            with self.server.lock:  # one poisoned request at a time: A has one slot
                self.server.poison(request["prompt"])
                self._forward("POST", body)
            return
        self._forward("POST", body)

    def _forward(self, method: str, body: bytes | None) -> None:
        headers = {"Content-Type": "application/json"} if body else {}
        answer = requests.request(
            method, self.server.a + self.path, data=body, headers=headers, timeout=TIMEOUT_S
        )
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)


@contextmanager
def poisoning(a: str, b: str, filename: str = "poison.bin") -> Iterator[_Proxy]:
    """The proxy in front of `a` (base URLs), serving on a free port until the block ends."""
    proxy = _Proxy(a.rstrip("/"), b.rstrip("/"), filename)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()

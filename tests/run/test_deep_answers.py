"""A server whose answers nest past Python's recursion limit: each test is an `error`
saying the answer is not JSON it can use, never an internal error (exit 3, issue 30)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DEEP = ("[" * 100_000 + "]" * 100_000).encode()


class DeepAnswers(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._answer(b"{}" if self.path == "/health" else DEEP)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(DEEP)

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def deep_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeepAnswers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("engine", ["sglang", "openai"])
def test_answers_nested_too_deep_are_test_errors(cli, tmp_path: Path, deep_server, engine):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: deep\nserver: {{engine: {engine}, base_url: '{deep_server}'}}\n"
        "tests: [{name: a, check: match, samples: 2, prompt_tokens: [8, 12], "
        "max_new_tokens: 4, vocab_size: 64}]\n"
    )
    done = cli(["run", str(suite), "--out", str(tmp_path / "out")])
    assert done.returncode == 2, done.stderr[-2000:]
    assert "internal error" not in done.stderr, done.stderr[-2000:]
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    (test,) = document["suites"][0]["tests"]
    assert test["status"] == "error" and "JSON" in test["message"], test

"""A local HTTP server shaped like vLLM's OpenAI-compatible server, for the adapter's tests.

Answers follow vLLM's documented shapes: `/v1/models`, `/version`, `/v1/completions` with
`logprobs` (tokens spelled "token_id:N" under `return_tokens_as_token_ids`), vLLM's
`prompt_logprobs` ([null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]),
`usage.prompt_tokens_details.cached_tokens` (only with `report_cached`, as vLLM's
--enable-prompt-tokens-details), and `POST /reset_prefix_cache` (only in `dev_mode`, as
VLLM_SERVER_DEV_MODE=1). The "model" is a pure function of the prefix, so a fresh replay
reproduces a decode exactly; the prefix cache keeps whole blocks, never the last prompt
token (as vLLM), and `drift` perturbs logprobs computed on top of a cache hit.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-org/fake-model"
BLOCK_SIZE = 4
VOCAB = 1000


def logprob(prefix: Sequence[int]) -> float:
    digest = hashlib.blake2b(repr(tuple(prefix)).encode(), digest_size=4).digest()
    return -0.05 - int.from_bytes(digest, "little") / 2**32 * 6


def next_token(prefix: Sequence[int], seed: int | None) -> int:
    key = repr((tuple(prefix), seed)).encode()
    digest = hashlib.blake2b(key, digest_size=4, person=b"t").digest()
    return 100 + int.from_bytes(digest, "little") % (VOCAB - 100)


@dataclass
class FakeVllmState:
    dev_mode: bool = True
    report_cached: bool = True
    drift: float = 0.0
    cache: set[tuple[int, ...]] = field(default_factory=set)
    requests: list[tuple[str, Any]] = field(default_factory=list)
    fail_with: int | None = None

    def cached_prefix(self, prompt: Sequence[int]) -> int:
        """Whole blocks of the prompt already seen, leaving at least one token to compute."""
        hit = 0
        for end in range(BLOCK_SIZE, len(prompt), BLOCK_SIZE):
            if tuple(prompt[:end]) in self.cache:
                hit = end
        return hit

    def remember(self, sequence: Sequence[int]) -> None:
        for end in range(BLOCK_SIZE, len(sequence) + 1, BLOCK_SIZE):
            self.cache.add(tuple(sequence[:end]))


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self.server.state.requests.append((f"GET {self.path}", None))
        if self.path == "/version":
            self._json(200, {"version": "0.11.0"})
        elif self.path == "/server_info?config_format=json" and self.server.state.dev_mode:
            # vLLM's dev-mode configuration dump, shaped after its VllmConfig (ours, trimmed).
            cache = {"block_size": BLOCK_SIZE, "enable_prefix_caching": True}
            config = {"cache_config": cache, "speculative_config": None, "model_config": {}}
            self._json(200, {"vllm_config": config})
        elif self.path == "/v1/models":
            model = {"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": 4096}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        state = self.server.state
        state.requests.append((f"POST {self.path}", body))
        if state.fail_with:
            self._json(state.fail_with, {"object": "error", "message": "engine is sad"})
        elif self.path == "/reset_prefix_cache" and state.dev_mode:
            state.cache.clear()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/completions":
            self._json(200, _complete(state, body))
        else:
            self._json(404, {"detail": "Not Found"})

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: FakeVllmState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


def _complete(state: FakeVllmState, body: dict[str, Any]) -> dict[str, Any]:
    prompt = [int(token) for token in body["prompt"]]
    # vLLM does not look prompt-logprob requests up in the prefix cache.
    cached = 0 if body.get("prompt_logprobs") is not None else state.cached_prefix(prompt)
    sequence, lps = list(prompt), []
    for _ in range(body.get("max_tokens", 16)):
        token = next_token(sequence, body.get("seed"))
        drift = state.drift if cached else 0.0
        lps.append(logprob([*sequence, token]) + drift)
        sequence.append(token)
    state.remember(sequence[:-1])
    choice: dict[str, Any] = {
        "index": 0,
        "text": "",
        "finish_reason": "length",
        "logprobs": _logprobs(body, sequence[len(prompt) :], lps),
        "prompt_logprobs": _prompt_logprobs(prompt)
        if body.get("prompt_logprobs") is not None
        else None,
    }
    details = {"cached_tokens": cached} if state.report_cached else None
    usage = {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(lps),
        "total_tokens": len(prompt) + len(lps),
        "prompt_tokens_details": details,
    }
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": MODEL,
        "choices": [choice],
        "usage": usage,
    }


def _logprobs(body: dict[str, Any], tokens: list[int], lps: list[float]) -> dict[str, Any] | None:
    if body.get("logprobs") is None:
        return None
    names = [
        f"token_id:{token}" if body.get("return_tokens_as_token_ids") else f"<{token}>"
        for token in tokens
    ]
    return {
        "text_offset": list(range(len(tokens))),
        "token_logprobs": lps,
        "tokens": names,
        "top_logprobs": [{name: lp} for name, lp in zip(names, lps, strict=True)],
    }


def _prompt_logprobs(prompt: list[int]) -> list[dict[str, Any] | None]:
    entries: list[dict[str, Any] | None] = [None]
    for position in range(1, len(prompt)):
        token = prompt[position]
        scored = {
            "logprob": logprob(prompt[: position + 1]),
            "rank": 1,
            "decoded_token": f"<{token}>",
        }
        entries.append({str(token): scored})
    return entries


@contextmanager
def running_fake_vllm(state: FakeVllmState | None = None) -> Iterator[tuple[str, FakeVllmState]]:
    """Serve on a free local port; yields (base_url, state)."""
    server = _Server(state or FakeVllmState())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 server's address, never bytes
        yield f"http://{host}:{port}", server.state
    finally:
        server.shutdown()
        server.server_close()

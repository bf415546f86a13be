"""The sglang adapter against a local HTTP server: request shapes, batching, errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines.base import SamplingParams
from kl_bitexact.run.engines.sglang import SglangEngine

Reply = Callable[[str, Any], tuple[int, Any]]


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (the timeout test) is expected, not worth a traceback."""


@pytest.fixture
def served() -> Iterator[Callable[[Reply], tuple[str, list[tuple[str, Any]]]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Reply) -> tuple[str, list[tuple[str, Any]]]:
        seen: list[tuple[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length)) if length else None
                seen.append((self.path, body))
                status, answer = reply(self.path, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle

        server = QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()  # joins the handler threads: none outlives its test


def generation(prompt: list[int], n: int) -> dict[str, Any]:
    return {
        "output_ids": list(range(n)),
        "meta_info": {
            "output_token_logprobs": [[-0.5 - i, i, None] for i in range(n)],
            "input_token_logprobs": [[None, prompt[0], None]]
            + [[-1.0, t, None] for t in prompt[1:]],
            "cached_tokens": 3,
            "prompt_tokens": len(prompt),
            "finish_reason": {"type": "length", "length": n},
        },
    }


def echo(path: str, body: Any) -> tuple[int, Any]:
    if path == "/server_info":
        return 200, {"page_size": 16, "disable_radix_cache": False}
    if path == "/flush_cache":
        return 200, b"Cache flushed.\n"
    n = body["sampling_params"]["max_new_tokens"]
    return 200, [generation(p, n) for p in body["input_ids"]]


def test_generate_sends_sglangs_request_and_decodes_the_answer(served):
    url, seen = served(echo)
    engine = SglangEngine(url, batch_size=2)
    answers = engine.generate([[5, 6, 7]] * 3, SamplingParams(max_new_tokens=2, seed=7))
    assert [len(a.output_ids) for a in answers] == [2, 2, 2]
    assert answers[0].output_logprobs == (-0.5, -1.5)
    assert answers[0].cached_tokens == 3 and answers[0].finish_reason == "length"
    bodies = [body for path, body in seen if path == "/generate"]
    assert [len(b["input_ids"]) for b in bodies] == [2, 1]  # batched
    assert bodies[0]["sampling_params"] == {
        "temperature": 1.0,
        "max_new_tokens": 2,
        "ignore_eos": True,
        "sampling_seed": 7,
    }
    assert bodies[0]["return_logprob"] is True and bodies[0]["logprob_start_len"] == -1


def test_replay_asks_for_every_input_logprob(served):
    url, seen = served(echo)
    engine = SglangEngine(url)
    [replay] = engine.replay([[5, 6, 7]])
    assert replay.input_logprobs == (None, -1.0, -1.0)
    assert replay.last(2) == (-1.0, -1.0)
    body = seen[-1][1]
    assert body["logprob_start_len"] == 0 and body["sampling_params"]["max_new_tokens"] == 0
    # A replay is cold: sglang has no per-request switch, so the cache is flushed first.
    sent = [path for path, _ in seen if path in ("/flush_cache", "/generate")]
    assert sent == ["/flush_cache", "/generate"]


def test_a_cold_generation_follows_a_flush(served):
    url, seen = served(echo)
    engine = SglangEngine(url)
    engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=1))
    engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=1, cold=True))
    assert [path for path, _ in seen] == ["/generate", "/flush_cache", "/generate"]


@pytest.mark.parametrize(("deterministic", "expected"), [(True, [5, 0]), (False, 0)])
def test_replay_of_the_last_positions_starts_one_before_them(served, deterministic, expected):
    def reply(path: str, body: Any) -> tuple[int, Any]:
        if path == "/server_info":
            return 200, {"enable_deterministic_inference": deterministic}
        if path == "/flush_cache":
            return 200, b"Cache flushed.\n"
        starts = body["logprob_start_len"]
        starts = starts if isinstance(starts, list) else [starts] * len(body["input_ids"])
        answers = [generation(p[s:], 0) for p, s in zip(body["input_ids"], starts, strict=True)]
        for answer in answers:
            answer["meta_info"]["cached_tokens"] = 0
        return 200, answers

    url, seen = served(reply)
    sequences = [list(range(10, 20)), [7, 8, 9]]
    replays = SglangEngine(url).replay(sequences, last=4)
    [body] = [body for path, body in seen if path == "/generate"]
    assert body["logprob_start_len"] == expected
    assert [replay.last(2) for replay in replays] == [(-1.0, -1.0)] * 2
    assert [len(replay.input_logprobs) for replay in replays] == [10, 3]
    assert (replays[0].input_logprobs[5] is None) is deterministic


def test_server_info_and_flush(served):
    url, seen = served(echo)
    engine = SglangEngine(url)
    assert engine.server_info()["page_size"] == 16
    assert engine.server_info()["page_size"] == 16
    engine.flush()
    # asked once (the probe's answer is the answer), then kept for the engine's life
    assert [path for path, _ in seen] == ["/server_info", "/flush_cache"]


def test_server_info_falls_back_to_the_older_name_on_an_older_server(served):
    def older(path: str, body: Any) -> tuple[int, Any]:
        if path == "/get_server_info":
            return 200, {"page_size": 32}
        return 404, {"error": f"{path} not found"}

    url, seen = served(older)
    engine = SglangEngine(url)
    assert engine.server_info()["page_size"] == 32
    assert engine.server_info()["page_size"] == 32
    # probed once, then the older path once, then kept
    assert [path for path, _ in seen] == ["/server_info", "/get_server_info"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (lambda p, b: (400, {"error": "token id 9999 out of range"}), "HTTP 400: .*out of range"),
        (lambda p, b: (200, b"<html>"), "not JSON"),
        (lambda p, b: (200, [{"output_ids": [1]}]), "no 'meta_info'"),
        (lambda p, b: (200, []), "0 answers for 1 prompts"),
    ],
)
def test_bad_answers_are_engine_errors(served, reply, expected):
    url, _ = served(reply)
    with pytest.raises(EngineError, match=expected):
        SglangEngine(url).generate([[1, 2]], SamplingParams(max_new_tokens=1))


def test_a_hanging_request_times_out(served):
    given_up = threading.Event()

    def hang(path: str, body: Any) -> tuple[int, Any]:
        given_up.wait(3)  # hangs until the client gave up (or 3 s)
        return 200, {}

    url, _ = served(hang)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"did not answer within 0\.5 s"):
        SglangEngine(url, request_timeout=0.5).flush()
    assert time.monotonic() - started < 2.5
    given_up.set()


def test_refused_connection_is_an_engine_error():
    with pytest.raises(EngineError, match="could not be reached"):
        SglangEngine("http://127.0.0.1:9").server_info()

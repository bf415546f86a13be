"""`Engine.replay(sequences, last=N)`: only the tail a check compares is scored.

- `Replay.last` refuses a tail with a missing value;
- the llama.cpp dialect sends one request per needed position, not per position;
- the sglang adapter against the reference engine (real server processes) gives the same
  TestResults with and without the tail, passing or failing; it uses the tail only with
  batch-invariant kernels, and re-scores from position 0 any tail whose prefix sglang served
  from its cache.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fake_engine import FakeEngine
from msgspec import structs

from kl_bitexact.results.model import TestResult
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Generation, Replay, Reported, SamplingParams, TokenIds
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.llamacpp import LlamaCppDialect
from kl_bitexact.run.engines.openai import OpenAIEngine
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import CacheAssert, CheckName, TestSpec

# --- Replay.last --------------------------------------------------------------------------


def test_last_returns_the_tail_and_refuses_a_missing_value() -> None:
    replay = Replay(input_logprobs=(None, None, -0.5, -0.25), cached_tokens=0)
    assert replay.last(2) == (-0.5, -0.25)
    assert replay.last(0) == ()
    with pytest.raises(ValueError, match="no logprob for position 1"):
        replay.last(3)
    with pytest.raises(ValueError, match="last 5 logprobs of 4 tokens"):
        replay.last(5)


def test_a_shared_replay_is_reused_only_where_it_holds_the_tail_needed() -> None:
    engine = FakeEngine()
    phases = Phases(engine)
    sequences = [(11, 12, 13, 14, 15, 16)]
    for last in (2, 2, 3, None, 4, None):
        phases.replay_cold(sequences, last=last)
    # Sent for 2, 3 and every position; a tail of 2 again and of 4 come from the earlier ones.
    assert engine.calls.count("replay(1)") == 3 and phases.reused == 3


# --- llama.cpp: one request per needed position -------------------------------------------


def forced_answer(body: Mapping[str, Any]) -> dict[str, Any]:
    """llama-server's answer to a scoring request: the forced token, a logprob that is a
    function of the prompt (so each position's value is recognisable)."""
    [token] = [int(key) for key in body["logit_bias"]]
    logprob = -len(body["prompt"]) / 100
    return {
        "tokens": [token],
        "completion_probabilities": [
            {"id": token, "token": "x", "bytes": [120], "logprob": logprob, "top_logprobs": []}
        ],
        "tokens_evaluated": len(body["prompt"]),
        "stop_type": "limit",
        "timings": {"cache_n": 0},
    }


@pytest.fixture
def llama_like() -> Iterator[tuple[OpenAIEngine, list[dict[str, Any]]]]:
    """A local HTTP server answering /completion as llama-server does a forced token."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            data = json.dumps(forced_answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = JsonClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield OpenAIEngine(client, LlamaCppDialect("tiny")), seen
    finally:
        server.shutdown()
        server.server_close()


def test_llamacpp_replay_of_the_last_positions_sends_only_their_requests(
    llama_like: tuple[OpenAIEngine, list[dict[str, Any]]],
) -> None:
    engine, seen = llama_like
    sequence = tuple(range(30, 40))
    [replay] = engine.replay([sequence], last=3)
    assert [body["prompt"] for body in seen] == [list(sequence[:i]) for i in (7, 8, 9)]
    assert [body["logit_bias"] for body in seen] == [{"37": 1000.0}, {"38": 1000.0}, {"39": 1000.0}]
    assert all(body["cache_prompt"] is False for body in seen)
    assert replay.input_logprobs == (None,) * 7 + (-0.07, -0.08, -0.09)
    assert replay.last(3) == (-0.07, -0.08, -0.09)
    with pytest.raises(ValueError, match="no logprob for position 6"):
        replay.last(4)


def test_llamacpp_replay_without_last_scores_every_position(
    llama_like: tuple[OpenAIEngine, list[dict[str, Any]]],
) -> None:
    engine, seen = llama_like
    [full] = engine.replay([tuple(range(30, 40))])
    assert len(seen) == 9 and full.input_logprobs[0] is None
    # A tail longer than the sequence is the whole replay.
    assert engine.replay([tuple(range(30, 40))], last=50) == [full]


# --- sglang against the reference engine: the tail changes no result ----------------------


class FullReplay:
    """The engine as it was before `last`: every replay scores every position."""

    def __init__(self, inner: SglangEngine) -> None:
        self.inner = inner

    def server_info(self) -> Mapping[str, Any]:
        return self.inner.server_info()

    def reported(self) -> Reported:
        return self.inner.reported()

    def flush(self) -> None:
        self.inner.flush()

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        return self.inner.generate(prompts, params)

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        return self.inner.replay(sequences)


SHAPE: dict[str, Any] = {"prompt_tokens": (72, 140), "max_new_tokens": 24, "vocab_size": 256}
SPECS = (
    TestSpec(name="match", check=CheckName.MATCH, samples=8, **SHAPE),
    TestSpec(name="prefill", check=CheckName.PREFILL_CACHE_HIT, samples=8, **SHAPE),
    TestSpec(name="decode", check=CheckName.DECODE_CACHE_HIT, samples=8, **SHAPE),
    TestSpec(
        name="multiturn",
        check=CheckName.MULTITURN,
        groups=3,
        branches=3,
        samples=9,
        prefix_tokens=64,
        turn_suffix_tokens=(64, 16),
        max_new_tokens=24,
        vocab_size=256,
        cache_assert=CacheAssert.MAMBA,
    ),
)
GEOMETRY = ("--page-size", "16", "--mamba-track-interval", "16")


@pytest.mark.parametrize(
    "args",
    [
        ("--enable-deterministic-inference", *GEOMETRY),
        # Cached prefills drift: the checks fail, with divergences to report.
        GEOMETRY,
        ("--enable-deterministic-inference", *GEOMETRY, "--fault", "branch-checkpoint-reuse"),
    ],
    ids=["deterministic", "drifting", "faulty"],
)
def test_results_are_identical_with_and_without_the_tail(
    reference_server: Any, args: tuple[str, ...]
) -> None:
    # Small batches, so that a later batch of a replay can find an earlier one in the cache.
    engine = SglangEngine(reference_server(*args).url, batch_size=4)
    for spec in SPECS:
        tailed = run_check(engine, spec)
        full = run_check(FullReplay(engine), spec)
        assert timeless(tailed) == timeless(full), spec.name


def test_a_tail_whose_prefix_came_from_the_cache_is_scored_again_fresh(
    reference_server: Any,
) -> None:
    args = ("--enable-deterministic-inference", *GEOMETRY)
    engine = SglangEngine(reference_server(*args).url, batch_size=1)
    shared = tuple(range(10, 74))
    sequences = [(*shared, 100, 101, 102, 103), (*shared, 110, 111, 112, 113)]
    engine.flush()
    full = engine.replay(sequences)
    engine.flush()
    tailed = engine.replay(sequences, last=4)
    # The second sequence's tail request found the first's 64-token prefix in the cache;
    # the adapter threw that answer away and scored the sequence from position 0.
    assert [replay.cached_tokens for replay in tailed] == [0, 0]
    assert [replay.last(4) for replay in tailed] == [replay.last(4) for replay in full]
    assert tailed[0].input_logprobs[:64] == (None,) * 64


def test_without_batch_invariant_kernels_every_position_is_scored(
    reference_server: Any,
) -> None:
    # Fewer rows through the final matmul may move the last bits of plain float32 BLAS.
    engine = SglangEngine(reference_server(*GEOMETRY).url)
    [replay] = engine.replay([tuple(range(10, 50))], last=4)
    assert replay.input_logprobs[0] is None
    assert all(value is not None for value in replay.input_logprobs[1:])


def timeless(result: TestResult) -> TestResult:
    return structs.replace(result, duration_s=0.0)

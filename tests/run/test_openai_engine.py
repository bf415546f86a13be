"""The OpenAI-compatible adapter against a local server shaped like vLLM (helpers/fake_vllm.py),
and llama.cpp's answer parsing on answers recorded from a real llama-server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_vllm import MODEL, FakeVllmState, logprob, running_fake_vllm

from kl_bitexact.errors import ConfigError, EngineError
from kl_bitexact.results.model import Status
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.engines import llamacpp
from kl_bitexact.run.engines.base import SamplingParams
from kl_bitexact.run.engines.llamacpp_withheld import withheld
from kl_bitexact.run.engines.openai import OpenAIEngine, connect
from kl_bitexact.suite.load import parse
from kl_bitexact.suite.model import CheckName, DialectName, TestSpec

PROMPTS = [tuple(range(200, 211)), tuple(range(300, 309))]


@pytest.fixture
def fake() -> Iterator[tuple[OpenAIEngine, FakeVllmState]]:
    with running_fake_vllm() as (url, state):
        yield connect(url), state


def spec(check: str, **overrides: object) -> TestSpec:
    fields: dict[str, object] = {
        "name": check,
        "check": CheckName(check),
        "samples": 4,
        "prompt_tokens": (9, 14),
        "max_new_tokens": 6,
        "vocab_size": 1000,
        "min_cache_hit_ratio": 0.5,
    }
    return TestSpec(**{**fields, **overrides})  # type: ignore[arg-type]


def test_detects_vllm_and_reports_its_model(fake: tuple[OpenAIEngine, FakeVllmState]) -> None:
    engine, _ = fake
    assert engine.dialect.name == "vllm"
    info = {"dialect": "vllm", "model": MODEL, "max_model_len": 4096, "version": "0.11.0"}
    assert engine.server_info() == info


def test_generate_sends_token_ids_and_reads_ids_logprobs_and_cached_tokens(
    fake: tuple[OpenAIEngine, FakeVllmState],
) -> None:
    engine, state = fake
    first = engine.generate(PROMPTS, SamplingParams(max_new_tokens=3, seed=5))
    again = engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=3, seed=5))

    # The prompts of a batch go out concurrently, in any order.
    body = next(b for _, b in state.requests if b and b["prompt"] == list(PROMPTS[0]))
    assert body["return_tokens_as_token_ids"] is True
    assert (body["max_tokens"], body["seed"], body["logprobs"]) == (3, 5, 1)
    assert [len(g.output_ids) for g in first] == [3, 3]
    sequence = list(PROMPTS[0])
    for token, value in zip(first[0].output_ids, first[0].output_logprobs, strict=True):
        sequence.append(token)
        assert value == logprob(sequence)
    assert [g.cached_tokens for g in first] == [0, 0]
    assert again[0].cached_tokens == 8  # two whole blocks of 4; the last token is computed
    assert again[0].prompt_tokens == len(PROMPTS[0])


def test_replay_uses_prompt_logprobs_and_reproduces_a_cold_decode(
    fake: tuple[OpenAIEngine, FakeVllmState],
) -> None:
    engine, state = fake
    generation = engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=3))[0]
    replay = engine.replay([PROMPTS[0] + generation.output_ids])[0]

    body = state.requests[-1][1]
    assert body["prompt_logprobs"] == 0
    assert replay.input_logprobs[0] is None
    assert len(replay.input_logprobs) == len(PROMPTS[0]) + 3
    assert replay.last(3) == generation.output_logprobs
    assert replay.cached_tokens == 0


def test_warm_up_keeps_no_output(fake: tuple[OpenAIEngine, FakeVllmState]) -> None:
    engine, state = fake
    warm = engine.generate(PROMPTS, SamplingParams(max_new_tokens=0))
    assert [g.output_ids for g in warm] == [(), ()]
    assert state.requests[-1][1]["max_tokens"] == 1  # vLLM rejects 0


def test_flush_resets_the_prefix_cache(fake: tuple[OpenAIEngine, FakeVllmState]) -> None:
    engine, state = fake
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=1))
    engine.flush()
    assert state.cache == set()
    assert engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=1))[0].cached_tokens == 0


def test_flush_without_dev_mode_names_the_fix() -> None:
    with running_fake_vllm(FakeVllmState(dev_mode=False)) as (url, _):
        engine = connect(url)
        with pytest.raises(EngineError) as error:
            engine.flush()
    assert "reset_prefix_cache" in error.value.message
    assert error.value.hint is not None and "VLLM_SERVER_DEV_MODE=1" in error.value.hint


def test_unreported_cached_tokens_are_unknown_not_zero() -> None:
    with running_fake_vllm(FakeVllmState(report_cached=False)) as (url, _):
        generation = connect(url).generate(PROMPTS[:1], SamplingParams(max_new_tokens=1))[0]
    assert generation.cached_tokens is None


def test_server_errors_name_the_url_and_status(fake: tuple[OpenAIEngine, FakeVllmState]) -> None:
    engine, state = fake
    state.fail_with = 500
    with pytest.raises(EngineError, match=r"/v1/completions answered 500: .*engine is sad"):
        engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=1))


def test_an_unreachable_server_is_an_engine_error() -> None:
    with running_fake_vllm() as (url, _):
        pass
    with pytest.raises(EngineError, match="failed"):
        connect(url, dialect=DialectName.VLLM)


def test_unknown_dialect_is_a_config_error(fake: tuple[OpenAIEngine, FakeVllmState]) -> None:
    engine, _ = fake
    with pytest.raises(ConfigError, match="'tgi' is not a known dialect"):
        # A caller that did not come through the suite loader, which never passes such a name.
        connect(engine.client.base_url, dialect="tgi")  # type: ignore[arg-type]


def test_a_server_with_neither_props_nor_version_needs_a_dialect() -> None:
    with running_fake_vllm() as (url, _), pytest.raises(ConfigError) as error:
        connect(url + "/nowhere")
    assert error.value.hint == "set server.dialect: vllm | llamacpp in the suite"


@pytest.mark.parametrize("check", ["match", "prefill_cache_hit", "decode_cache_hit"])
def test_checks_pass_exactly_on_a_consistent_server(
    fake: tuple[OpenAIEngine, FakeVllmState], check: str
) -> None:
    engine, _ = fake
    result = run_check(engine, spec(check, exact=True))
    assert result.status is Status.PASSED, result.message
    assert result.exact is not None and result.exact.tokens > 0
    assert result.exact.mismatched == 0


@pytest.mark.parametrize("check", ["prefill_cache_hit", "decode_cache_hit"])
def test_drift_on_cache_hits_fails_exact_mode(check: str) -> None:
    with running_fake_vllm(FakeVllmState(drift=2e-7)) as (url, _):
        result = run_check(connect(url), spec(check, exact=True))
    assert result.status is Status.FAILED
    assert result.exact is not None and result.exact.mismatched == result.exact.tokens
    assert result.kl_div is not None and 0 < result.kl_div < 1e-9
    assert "logprobs differ" in result.message


@pytest.mark.parametrize("check", ["prefill_cache_hit", "decode_cache_hit"])
def test_cache_checks_are_not_run_when_cached_tokens_are_unreported(check: str) -> None:
    with running_fake_vllm(FakeVllmState(report_cached=False)) as (url, _):
        result = run_check(connect(url), spec(check))
    assert result.status is Status.NOT_RUN
    assert "cached_tokens" in result.message


def test_suite_accepts_a_dialect_for_openai_only() -> None:
    text = "name: s\nserver: {engine: openai, dialect: llamacpp, base_url: 'http://h:1'}\n"
    text += "tests: [{name: t, check: match}]\n"
    assert parse(text, source="s.yaml")[0].server.dialect == "llamacpp"
    with pytest.raises(ConfigError, match=r"dialect.*one of vllm, llamacpp"):
        parse(text.replace("llamacpp", "llama"), source="s.yaml")
    with pytest.raises(ConfigError, match="only applies to engine: openai"):
        parse(text.replace("engine: openai", "engine: sglang"), source="s.yaml")


# --- llama.cpp answers (shapes recorded from llama-server, llama.cpp b1-0c1e570) ---------

# Shaped like llama-server's `/completion` answer with `n_probs: 1, return_tokens: true`
# (tools/server/server-task.cpp, to_json_non_oaicompat), trimmed to the fields read.
LLAMACPP_ANSWER: dict[str, Any] = {
    "content": "+\u000e",
    "tokens": [46, 17],
    "tokens_evaluated": 16,
    "stop_type": "limit",
    "timings": {"cache_n": 15, "prompt_n": 1},
    "completion_probabilities": [
        {"id": 46, "token": "+", "bytes": [43], "logprob": -1.2355107069015503, "top_logprobs": []},
        {"id": 17, "token": "\u000e", "bytes": [14], "logprob": -0.13977184891700745},
    ],
}


def test_llamacpp_generation_reads_ids_logprobs_and_cached_tokens() -> None:
    generation = llamacpp.parse_generation(LLAMACPP_ANSWER, 2, None)
    assert generation.output_ids == (46, 17)
    assert generation.output_logprobs == (-1.2355107069015503, -0.13977184891700745)
    assert (generation.cached_tokens, generation.prompt_tokens) == (15, 16)
    assert generation.finish_reason == "length"


def test_llamacpp_generation_places_entries_around_withheld_byte_tokens() -> None:
    # <0xE4> <0xB8> <0xAD> spell 中: llama-server reports only the token completing it.
    answer = {
        **LLAMACPP_ANSWER,
        "tokens": [46, 231, 187, 176],
        "completion_probabilities": [
            {"id": 46, "logprob": -1.5},
            {"id": 176, "bytes": [228, 184, 173], "logprob": -2.5},
        ],
    }
    kept_back = withheld([b"+", b"\xe4", b"\xb8", b"\xad"])
    generation = llamacpp.parse_generation(answer, 4, kept_back)
    assert generation.output_ids == (46, 231, 187, 176)
    assert generation.output_logprobs == (-1.5, None, None, -2.5)


def test_llamacpp_cached_tokens_are_timings_cache_n() -> None:
    assert llamacpp.cached_tokens(LLAMACPP_ANSWER) == 15
    assert llamacpp.cached_tokens({"tokens": []}) is None


def test_llamacpp_replay_refuses_a_token_the_server_did_not_force() -> None:
    with pytest.raises(EngineError, match=r"sampled \[46\], not the forced token 17"):
        llamacpp.forced_logprob(LLAMACPP_ANSWER, 17, 5)
    assert llamacpp.forced_logprob(LLAMACPP_ANSWER, 46, 5) == -1.2355107069015503


def test_llamacpp_replay_of_a_withheld_token_is_not_reported() -> None:
    answer = {**LLAMACPP_ANSWER, "tokens": [231]}
    del answer["completion_probabilities"]
    assert llamacpp.forced_logprob(answer, 231, 5) is None


def test_llamacpp_pieces_are_text_or_bytes() -> None:
    assert llamacpp.piece_bytes(" w1") == b" w1"
    assert llamacpp.piece_bytes([228]) == b"\xe4"
    with pytest.raises(EngineError, match="not text or bytes"):
        llamacpp.piece_bytes([300])


def test_the_engine_identity_is_what_the_server_reports() -> None:
    from kl_bitexact.run.engines.base import Identity, identity

    sglang = {"version": "0.5.4", "device": "cuda", "attention_backend": "fa3"}
    assert identity(sglang) == Identity("0.5.4", None, "cuda, attention fa3")
    llamacpp_log = [
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:00:07.0) - "
        "142000 MiB free",
        "load_tensors: offloaded 9/9 layers to GPU",
    ]
    found = identity({"build": "b1-0c1e570", "version": None}, llamacpp_log)
    assert found == Identity(None, "b1-0c1e570", "CUDA0 (NVIDIA H200)")
    assert identity({"version": {"nested": 1}, "build": "x" * 999}).build == "x" * 200
    # What llama-server on the H200 logged (llama-cpp-python 0.3.36's llama.cpp, issue 31).
    h200 = "0.00.367.015 W resolve_fused_ops: layer 0 is assigned to device CUDA0 but Flash "
    h200 += "Attention is assigned to device CPU (usually due to missing support)"
    assert identity({}, [h200]).backend == "CUDA0"

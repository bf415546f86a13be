"""A client that hangs up mid-prefill: the engine notices between chunks and drops the
request; what the cache keeps of it is sound, except under reuse-after-abandoned-prefill."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_scenarios import engine, prompts

from kl_bitexact.reference.abandon import Abandoned
from kl_bitexact.reference.engine import ReferenceEngine
from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.protocol import GenerateResult, parse_generate
from kl_bitexact.run.engines.abandon import hang_up

FAULT = Fault.REUSE_AFTER_ABANDONED_PREFILL
# Prompt of 150 tokens: chunks of 64 end at 64 and 128; the prompt's last page ends at 144.
PROMPT = prompts(1, low=150, high=151, seed=5)[0]
FOLLOW = PROMPT + prompts(1, low=20, high=21, seed=6)[0]
NEW = 6


def one(
    target: ReferenceEngine, prompt: list[int], gone: Callable[[], bool] | None = None
) -> GenerateResult:
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": NEW, "ignore_eos": True, "sampling_seed": 1},
        "return_logprob": True,
    }
    requests_, _ = parse_generate(body, target.limits)
    [result] = target.generate(requests_, gone=gone)
    return result


@settings(max_examples=12, deadline=None)
@given(cached=st.sampled_from([0, 16, 64, 80]), length=st.integers(2, 300))
def test_chunk_by_chunk_prefill_gives_the_bits_and_cache_of_one_feed(cached, length):
    """A client that stays is served exactly as before: watched chunk by chunk or not."""
    prompt = prompts(1, low=300, high=301, seed=9)[0][:length]
    answers = []
    for gone in (None, lambda: False):
        target = engine()
        one(target, [*prompt[:cached], 7])  # a cached prefix, when there is one
        first = one(target, prompt, gone)
        then = one(target, [*prompt, 3, 4])
        answers.append((first, then))
    assert answers[0] == answers[1]


def abandoned_then_follow(fault: bool) -> tuple[Abandoned, GenerateResult, GenerateResult]:
    target = engine(faults=frozenset({FAULT}) if fault else frozenset())
    with pytest.raises(Abandoned) as dropped:
        one(target, PROMPT, gone=lambda: True)
    follow = one(target, FOLLOW)
    fresh = one(engine(), FOLLOW)
    return dropped.value, follow, fresh


def test_a_healthy_abort_caches_only_the_computed_chunk():
    dropped, follow, fresh = abandoned_then_follow(fault=False)
    assert (dropped.done, dropped.total, dropped.fed) == (1, 3, 64)
    assert "its 4 computed page(s) cached" in str(dropped)
    assert follow.cached_tokens == 64
    assert follow.output_logprobs == fresh.output_logprobs


def test_the_fault_caches_the_abandoned_prompt_as_if_complete():
    dropped, follow, fresh = abandoned_then_follow(fault=True)
    assert "9 page(s) cached as if complete" in str(dropped)
    assert follow.cached_tokens == 144
    assert follow.output_logprobs != fresh.output_logprobs


def test_a_batch_or_a_one_chunk_prompt_is_never_abandoned():
    target = engine(faults=frozenset({FAULT}))
    short = one(target, PROMPT[:64], gone=lambda: True)  # one chunk: nothing to watch between
    assert len(short.output_ids) == NEW


def follow_over_http(url: str) -> tuple[dict, list]:
    body = {
        "input_ids": FOLLOW,
        "sampling_params": {"max_new_tokens": NEW, "ignore_eos": True, "temperature": 0},
        "return_logprob": True,
    }
    answer = requests.post(url + "/generate", json=body, timeout=60).json()
    requests.post(url + "/flush_cache", timeout=60)
    sequence = FOLLOW + answer["output_ids"]
    replay = {"input_ids": sequence, "sampling_params": {"max_new_tokens": 0}}
    replay |= {"return_logprob": True, "logprob_start_len": 0}
    scored = requests.post(url + "/generate", json=replay, timeout=60).json()
    return answer["meta_info"], [e[0] for e in scored["meta_info"]["input_token_logprobs"][-NEW:]]


@pytest.mark.parametrize("fault", [True, False])
def test_a_real_hang_up_mid_prefill_is_noticed_and_only_the_fault_corrupts_reuse(
    reference_server, fault
):
    args = ["--enable-deterministic-inference", "--chunked-prefill-size", "16"]
    server = reference_server(*args, *(["--fault", FAULT.value] if fault else []))
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4}}
    ended = hang_up(server.url, "/generate", body, after_s=0.0, wait_s=30, connect_s=10)
    assert ended.finished and not ended.answered, ended
    # Noticed after the first chunk on a quiet machine; a loaded one may finish more first.
    said = re.search(
        r"client disconnected after prefill chunk (\d) of 10 \((\d+) of 150", server.stderr()
    )
    assert said is not None, server.stderr()
    meta, replayed = follow_over_http(server.url)
    decoded = [e[0] for e in meta["output_token_logprobs"]]
    assert meta["cached_tokens"] == (144 if fault else int(said[2]))
    assert (decoded != replayed) is fault

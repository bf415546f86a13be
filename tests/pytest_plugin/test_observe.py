"""The observer's pairing: a decode and its replay, as sglang's helpers pair them."""

from __future__ import annotations

from typing import Any

import requests

from kl_bitexact.pytest_plugin.observe import MAX_PENDING, RequestsTap, TestObservation


def entries(values: list[float | None], tokens: list[int]) -> list[list[Any]]:
    return [[value, token, None] for value, token in zip(values, tokens, strict=True)]


def decode(prompt: list[int], outputs: list[int], logprobs: list[float], cached: int = 0) -> Any:
    meta = {
        "cached_tokens": cached,
        "output_token_logprobs": entries(list(logprobs), outputs),
        "input_token_logprobs": [[None, prompt[-1], None]],
    }
    return {"text": "", "output_ids": outputs, "meta_info": meta}


def replay(sequence: list[int], logprobs: list[float | None]) -> Any:
    meta = {"cached_tokens": 0, "input_token_logprobs": entries(logprobs, sequence)}
    return {"text": "", "output_ids": [], "meta_info": meta}


def generate(observation: TestObservation, body: dict[str, Any], answer: Any) -> None:
    observation.answered("/generate", body, answer)


def test_a_replay_of_prompt_plus_outputs_pairs_its_tail_with_the_decode() -> None:
    seen = TestObservation()
    prompts = [[5, 6, 7], [8, 9]]
    generate(
        seen,
        {"input_ids": prompts, "return_logprob": True},
        [decode(prompts[0], [1, 2], [-1.0, -2.0], 2), decode(prompts[1], [3], [-3.0])],
    )
    sequences = [prompts[0] + [1, 2], prompts[1] + [3]]
    generate(
        seen,
        {"input_ids": sequences, "return_logprob": True, "logprob_start_len": 0},
        [
            replay(sequences[0], [None, -0.5, -0.6, -1.0, -2.5]),
            replay(sequences[1], [None, -0.1, -3.0]),
        ],
    )
    exact = seen.exact()
    assert exact is not None and (exact.tokens, exact.mismatched) == (3, 1)
    [divergence] = seen.divergences()
    assert (divergence.sample, divergence.token_index) == (0, 1)
    assert (divergence.decode_logprob, divergence.replay_logprob) == (-2.0, -2.5)
    assert divergence.cached_tokens == 2


def test_only_the_last_turn_is_paired_and_each_decode_once() -> None:
    """Turn 1's outputs sit inside turn 2's prompt: a replay of turn 2 scores them again, but
    sglang compares only turn 2's outputs; a second replay pairs nothing more."""
    seen = TestObservation()
    first = [1, 2, 3]
    generate(seen, {"input_ids": first, "return_logprob": True}, decode(first, [4, 5], [-1, -2]))
    second = [*first, 4, 5, 9]
    generate(seen, {"input_ids": second, "return_logprob": True}, decode(second, [6], [-3.0]))
    full = [*second, 6]
    body = {"input_ids": full, "return_logprob": True, "logprob_start_len": 0}
    answer = replay(full, [None, -9, -9, -9.0, -9.0, -9, -3.0])
    generate(seen, body, answer)
    generate(seen, body, answer)
    exact = seen.exact()
    assert exact is not None and (exact.tokens, exact.mismatched) == (1, 0)


def test_a_replay_that_does_not_score_the_outputs_or_another_sequence_pairs_nothing() -> None:
    seen = TestObservation()
    prompt = [1, 2, 3]
    generate(seen, {"input_ids": prompt, "return_logprob": True}, decode(prompt, [4, 5], [-1, -2]))
    # the default logprob_start_len (-1) scores only the last prompt token
    generate(seen, {"input_ids": [1, 2, 3, 4, 5]}, replay([5], [None]))
    generate(
        seen, {"input_ids": [1, 2, 3, 4, 6], "logprob_start_len": 0}, replay([1] * 5, [-1.0] * 5)
    )
    assert seen.exact() is None and seen.record(enforced=False)["exact"] is None
    assert seen.record(enforced=False)["generated"] == 3


def test_per_prompt_start_lengths_and_unreported_positions() -> None:
    seen = TestObservation()
    prompt = [1, 2]
    generate(seen, {"input_ids": prompt}, decode(prompt, [3, 4], [-1.0, -2.0]))
    body = {"input_ids": [[1, 2, 3, 4]], "logprob_start_len": [2], "return_logprob": True}
    generate(seen, body, [replay([3, 4], [None, -2.0])])
    record = seen.record(enforced=True)
    assert record is not None
    assert record["exact"] == {"tokens": 1, "mismatched": 0, "not_reported": 1, "enforced": True}


def test_every_decode_of_a_prompt_is_compared_with_its_replay() -> None:
    """Issue 36, item 10: a cached decode with a differing logprob, then a cold decode of
    the same prompt, then one replay - the cached decode's difference is counted."""
    seen = TestObservation()
    prompt = [1, 2, 3]
    body = {"input_ids": prompt, "return_logprob": True}
    generate(seen, body, decode(prompt, [4, 5], [-1.0, -2.25], cached=2))
    generate(seen, body, decode(prompt, [4, 5], [-1.0, -2.0], cached=0))
    sequence = [*prompt, 4, 5]
    generate(
        seen,
        {"input_ids": sequence, "return_logprob": True, "logprob_start_len": 0},
        replay(sequence, [None, -9.0, -9.0, -1.0, -2.0]),
    )
    exact = seen.exact()
    assert exact is not None and (exact.tokens, exact.mismatched) == (4, 1)
    [divergence] = seen.divergences()
    assert (divergence.cached_tokens, divergence.token_index) == (2, 1)
    assert (divergence.decode_logprob, divergence.replay_logprob) == (-2.25, -2.0)
    assert not seen.pending and seen.waiting == 0


def test_waiting_decodes_are_bounded() -> None:
    seen = TestObservation()
    for i in range(MAX_PENDING + 10):
        prompt = [i % 7 + 1]  # the same few prompts decoded again and again
        generate(seen, {"input_ids": prompt}, decode(prompt, [7], [-1.0]))
    assert seen.waiting == MAX_PENDING
    assert sum(len(decodes) for decodes in seen.pending.values()) == MAX_PENDING


def test_answers_it_cannot_read_are_skipped() -> None:
    seen = TestObservation()
    generate(seen, {"input_ids": "text"}, {"error": "no"})
    generate(
        seen, {"input_ids": [1]}, {"output_ids": [2], "meta_info": {"output_token_logprobs": "x"}}
    )
    seen.answered("/generate", [1, 2], None)
    seen.answered("/server_info", None, {"page_size": 64, "mamba_track_interval": 128})
    assert seen.exact() is None and seen.geometry.page_size == 64


def test_the_tap_sees_what_requests_receives_and_goes_away(reference_server: Any) -> None:
    server = reference_server(
        "--enable-deterministic-inference", "--fault", "checkpoint-off-by-one"
    )
    tap = RequestsTap()
    tap.install()
    try:
        tap.current = seen = TestObservation()
        prompt = list(range(1, 70))
        params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
        requests.post(
            server.url + "/generate",
            json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}},
            timeout=30,
        )
        first = requests.post(
            server.url + "/generate",
            json={"input_ids": prompt, "sampling_params": params, "return_logprob": True},
            timeout=30,
        ).json()
        assert first["meta_info"]["cached_tokens"] > 0
        requests.post(server.url + "/flush_cache", timeout=30)
        sequence = prompt + first["output_ids"]
        requests.post(
            server.url + "/generate",
            json={
                "input_ids": sequence,
                "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            },
            timeout=30,
        )
    finally:
        tap.remove()
    exact = seen.exact()
    assert exact is not None and exact.tokens == 8 and exact.mismatched > 0
    after = TestObservation()
    tap.current = after
    requests.post(server.url + "/generate", json={"input_ids": prompt}, timeout=30)
    assert not after.pending

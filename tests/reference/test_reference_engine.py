"""The reference engine's cache semantics: geometry of hits, faults, speculative decoding."""

from __future__ import annotations

import dataclasses

import pytest
from reference_scenarios import (
    decode_cache_hit,
    engine,
    generate,
    multiturn,
    prefill_cache_hit,
    pressure_restore,
    prompts,
    replay,
)

from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.protocol import parse_generate

NEW = 18  # one page plus two: with a track interval of two pages, half the turns can hit
PROMPTS = prompts(16)


def expected_cached(prompt: int, fed: int, limit: int, page: int, track: int, chunk: int) -> int:
    """What a request may reuse of a sequence whose first `fed` tokens were computed, the
    first `prompt` of them by prefill: the latest tracked state (only the latest is kept) if
    it is page-aligned, else the last prefill chunk checkpoint; at most `limit` tokens."""
    last_track = fed // track * track
    candidates = list(range(chunk, min(prompt, limit) + 1, chunk))
    if last_track <= limit and last_track % page == 0:
        candidates.append(last_track)
    return max(candidates, default=0)


@pytest.mark.parametrize(("page", "track"), [(16, 16), (16, 32), (16, 24), (8, 32)])
def test_decode_hits_follow_page_and_track_geometry(page, track):
    target = engine(page_size=page, mamba_track_interval=track, chunked_prefill_size=64)
    outcome = decode_cache_hit(target, PROMPTS, NEW)
    # The last generated token is never fed; turn 2 may reuse up to prompt + outputs.
    expected = [
        expected_cached(len(p), len(p) + NEW - 1, len(p) + NEW, page, track, 64) for p in PROMPTS
    ]
    assert list(outcome.cached) == expected
    assert outcome.mismatched == 0


def test_track_interval_twice_the_page_loses_about_half_the_decode_hits():
    firsts = prompts(32, seed=7)
    aligned = decode_cache_hit(engine(page_size=16, mamba_track_interval=16), firsts, NEW)
    doubled = decode_cache_hit(engine(page_size=16, mamba_track_interval=32), firsts, NEW)
    assert aligned.hits == 32
    assert 0.3 * 32 <= doubled.hits <= 0.7 * 32


@pytest.mark.parametrize(("track", "chunk"), [(16, 32), (48, 32), (24, 64)])
def test_prefill_hits_land_on_chunk_boundaries_or_the_last_track_point(track, chunk):
    target = engine(page_size=16, mamba_track_interval=track, chunked_prefill_size=chunk)
    outcome = prefill_cache_hit(target, PROMPTS, 4)
    expected = [expected_cached(len(p), len(p), len(p) - 1, 16, track, chunk) for p in PROMPTS]
    assert list(outcome.cached) == expected
    assert outcome.mismatched == 0


def test_disabled_radix_cache_never_hits():
    outcome = prefill_cache_hit(engine(disable_radix_cache=True), PROMPTS[:4], 4)
    assert outcome.hits == 0


def test_replay_never_reuses_the_cache():
    target = engine()
    generate(target, PROMPTS[:2], 0)
    assert [r.cached_tokens for r in generate(target, PROMPTS[:2], 0, start=0)] == [0, 0]


def test_released_window_pages_block_a_hit_at_that_checkpoint():
    target = engine(page_size=16, chunked_prefill_size=64, sliding_window_size=32)
    prompt = PROMPTS[0][:200]
    generate(target, [prompt], 0)
    assert target.cache.match(prompt, 199).length == 192
    node = target.cache.root
    for index in range(12):  # walk to the page covering positions 176..191
        node = node.children[tuple(prompt[index * 16 : (index + 1) * 16])]
    assert node.device is not None
    node.device = dataclasses.replace(node.device, window_kv=None)
    assert target.cache.match(prompt, 199).length == 128


def test_eviction_keeps_the_device_budget_and_hits_stay_exact():
    target = engine(max_total_tokens=512)
    outcome = prefill_cache_hit(target, PROMPTS, 4)
    assert target.cache.device_tokens <= 512
    assert 0 < outcome.hits < len(PROMPTS)
    assert outcome.mismatched == 0


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_host_tier_round_trip_is_bit_exact(policy):
    target = engine(
        max_total_tokens=512,
        enable_hierarchical_cache=True,
        hicache_write_policy=policy,
        hicache_ratio=64,
    )
    outcome = prefill_cache_hit(target, PROMPTS, 4)
    assert outcome.hits == len(PROMPTS)  # the host tier keeps what the device evicted
    assert outcome.mismatched == 0


SPECULATIVE = {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4}


def test_speculative_decoding_returns_what_ordinary_decoding_returns():
    plain = generate(engine(), PROMPTS[:6], 12)
    fast = generate(engine(**SPECULATIVE), PROMPTS[:6], 12)
    assert [r.output_ids for r in fast] == [r.output_ids for r in plain]
    assert [r.output_logprobs for r in fast] == [r.output_logprobs for r in plain]


def test_speculative_overshoot_costs_a_few_decode_hits_but_never_exactness():
    firsts = prompts(32, seed=7)
    outcome = decode_cache_hit(engine(**SPECULATIVE), firsts, 32)
    assert 0.8 * 32 <= outcome.hits < 32
    assert outcome.mismatched == 0


# Each fault and the check expected to catch it (docs/reference-engine.md), with the
# server settings that check needs.
HICACHE = {"enable_hierarchical_cache": True, "max_total_tokens": 512, "hicache_ratio": 64}
FAULT_CASES = [
    (Fault.CHECKPOINT_OFF_BY_ONE, "decode", {}),
    (Fault.CHECKPOINT_OFF_BY_ONE, "prefill", {}),
    (Fault.SWA_EARLY_RELEASE, "decode", {}),
    (Fault.SWA_EARLY_RELEASE, "prefill", {}),
    (Fault.HICACHE_LOSSY, "prefill", HICACHE),
    (Fault.SPEC_OVERSHOOT_CACHED, "decode-32", SPECULATIVE),
    (Fault.BRANCH_CHECKPOINT_REUSE, "multiturn", {}),
    (Fault.RESTORE_AFTER_EVICTION, "pressure", HICACHE),
]
SCENARIOS = {
    "decode": lambda target: decode_cache_hit(target, PROMPTS[:8], 16),
    # Overshoot hits only some turns: the sglang-sized scenario.
    "decode-32": lambda target: decode_cache_hit(target, prompts(32, seed=7), 32),
    "prefill": lambda target: prefill_cache_hit(target, PROMPTS, 8),
    "multiturn": multiturn,
    "pressure": pressure_restore,
}


@pytest.mark.parametrize(
    ("fault", "scenario", "settings"),
    FAULT_CASES,
    ids=[f"{fault.value}-{scenario}" for fault, scenario, _ in FAULT_CASES],
)
def test_each_fault_makes_the_cached_path_differ(fault, scenario, settings):
    healthy = SCENARIOS[scenario](engine(**settings))
    faulty = SCENARIOS[scenario](engine(**settings, faults=frozenset([fault])))
    assert healthy.mismatched == 0
    assert faulty.mismatched > 0


STATE_LAYER_FAULTS = [fault for fault in Fault if fault is not Fault.ORDER_DEPENDENT_DECODE]


@pytest.mark.parametrize("fault", STATE_LAYER_FAULTS)
def test_faults_leave_the_uncached_path_untouched(fault):
    sequences = PROMPTS[:3]
    settings = {**HICACHE, **SPECULATIVE}
    healthy = engine(**settings)
    faulty = engine(**settings, faults=frozenset([fault]))
    assert replay(faulty, sequences, 50) == replay(healthy, sequences, 50)
    faulty.flush()
    healthy.flush()
    assert [r.output_logprobs for r in generate(faulty, sequences, 6)] == [
        r.output_logprobs for r in generate(healthy, sequences, 6)
    ]


def test_order_dependent_decode_depends_on_what_was_served_before():
    """The same request twice on one server differs in the last bit of some decoded
    logprobs; a fresh server replays the same history exactly; prefill is untouched."""
    fault = frozenset([Fault.ORDER_DEPENDENT_DECODE])
    sequences = PROMPTS[:3]
    first, second = engine(faults=fault), engine(faults=fault)
    runs = [generate(first, sequences, 12) for _ in range(2)]
    again = generate(second, sequences, 12)
    logprobs = [[r.output_logprobs for r in run] for run in (*runs, again)]
    assert logprobs[0] != logprobs[1] and logprobs[0] == logprobs[2]
    moved = [
        (a, b)
        for x, y in zip(logprobs[0], logprobs[1], strict=True)
        for a, b in zip(x, y, strict=True)
        if a != b
    ]
    assert all(abs(a - b) <= 2 * abs(a) * 2**-52 for a, b in moved)  # at most an ulp or so
    assert replay(first, sequences, 50) == replay(engine(), sequences, 50)


def test_plain_arithmetic_drifts_only_in_the_last_bits():
    target = engine(enable_deterministic_inference=False)
    target.flush()
    generate(target, PROMPTS[:8], 0)
    results = generate(target, PROMPTS[:8], 8)
    target.flush()
    fresh = replay(
        target, [p + list(r.output_ids) for p, r in zip(PROMPTS[:8], results, strict=True)], 8
    )
    for result, scored in zip(results, fresh, strict=True):
        assert result.cached_tokens > 0
        for decoded, replayed in zip(result.output_logprobs, scored, strict=True):
            assert replayed is not None  # a replayed position past the first has a logprob
            assert abs(decoded - replayed) < 1e-4


@pytest.mark.parametrize("settings", [{}, SPECULATIVE])
def test_eos_stops_generation_unless_ignored(settings):
    target = engine(**settings)
    body = {"max_new_tokens": 300, "temperature": 50, "sampling_seed": 0}
    requests, _ = parse_generate({"input_ids": [1, 2, 3], "sampling_params": body}, target.limits)
    stopped = target.generate(requests)[0]
    assert stopped.finish_reason == {"type": "stop", "matched": 0}
    assert stopped.output_ids[-1] == 0 and 0 not in stopped.output_ids[:-1]
    body["ignore_eos"] = True
    requests, _ = parse_generate({"input_ids": [1, 2, 3], "sampling_params": body}, target.limits)
    ignored = target.generate(requests)[0]
    assert ignored.finish_reason == {"type": "length", "length": 300}
    assert ignored.output_ids[: len(stopped.output_ids)] == stopped.output_ids


def test_a_fault_its_flags_keep_from_acting_is_named_with_the_flag():
    from kl_bitexact.reference.config import EngineConfig

    both = frozenset({Fault.HICACHE_LOSSY, Fault.SPEC_OVERSHOOT_CACHED})
    lossy, overshoot = EngineConfig(faults=both).inactive_faults()
    assert lossy.startswith("--fault hicache-lossy cannot act on this server (no host tier")
    assert lossy.endswith("; add --enable-hierarchical-cache")
    assert overshoot.endswith("; add --speculative-algorithm EAGLE")
    able = EngineConfig(enable_hierarchical_cache=True, speculative_algorithm="EAGLE", faults=both)
    assert able.inactive_faults() == ()
    [uncached] = EngineConfig(
        disable_radix_cache=True, faults=frozenset({Fault.CHECKPOINT_OFF_BY_ONE})
    ).inactive_faults()
    assert "(--disable-radix-cache: nothing is reused)" in uncached
    # Not a state-layer fault: it acts on every server.
    order = EngineConfig(disable_radix_cache=True, faults=frozenset({Fault.ORDER_DEPENDENT_DECODE}))
    assert order.inactive_faults() == ()


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_larger_vocabulary_is_a_distribution_over_every_id_at_the_same_cost(deterministic):
    """--vocab-size N > 320: each id's logprob is its class's plus log(weight / W(class)),
    so exp(logprobs) of all N ids sums to 1, and the first 320 ids keep their weights."""
    import numpy as np

    from kl_bitexact.reference.engine import ReferenceEngine
    from kl_bitexact.reference.model import init_weights

    big = ReferenceEngine(
        dataclasses.replace(
            engine().config, vocab_size=32768, enable_deterministic_inference=deterministic
        )
    )
    small = engine()
    assert np.array_equal(
        init_weights(big.spec, 0).embedding[:320], init_weights(small.spec, 0).embedding
    )
    assert np.array_equal(init_weights(big.spec, 0).head, init_weights(small.spec, 0).head)
    hidden, _ = big.model.extend([big.model.new_state(64)], [[1, 31000, 777, 320]], [frozenset()])
    row = big.model.logprobs(hidden[0])[-1].astype(np.float64)
    every = np.array([big.vocabulary.logprob(row, token) for token in range(32768)])
    assert abs(np.logaddexp.reduce(every)) < 1e-5
    greedy = big.vocabulary.sample(row, 0.0, 0, 0)
    assert every[greedy] == every.max()


@pytest.mark.parametrize(("page", "track"), [(16, 16), (64, 64), (16, 32)])
def test_the_overlap_schedule_caches_a_finished_request_whole(page, track):
    """sglang's overlapping scheduler (its default) has fed a request's last output token
    when it finishes; sglang's August 2026 kits assert `cached_tokens == history_len +
    output_len` and were red by one page on the reference engine (issue 38)."""
    settings = {"page_size": page, "mamba_track_interval": track, "chunked_prefill_size": 64}
    overlapped = decode_cache_hit(engine(**settings, overlap_schedule=True), PROMPTS, NEW)
    expected = [
        expected_cached(len(p), len(p) + NEW, len(p) + NEW, page, track, 64) for p in PROMPTS
    ]
    assert list(overlapped.cached) == expected
    assert overlapped.mismatched == 0
    plain = decode_cache_hit(engine(**settings), PROMPTS, NEW)
    assert all(o >= p for o, p in zip(overlapped.cached, plain.cached, strict=True))


def test_cached_tokens_say_how_many_came_back_from_the_host_tier():
    """sglang's `cached_tokens_details` {device, host}: read by its HiCache load-back KL
    files (August 2026), absent on the reference engine before (a KeyError or a 0)."""
    target = engine(page_size=16, max_total_tokens=256, enable_hierarchical_cache=True)
    first, *pressure = prompts(6, seed=3)
    generate(target, [first], 1)
    for prompt in pressure:  # each fills the device cache: `first` moves to the host tier
        generate(target, [prompt], 1)
    [back] = generate(target, [first], 4)
    assert back.cached_from_host is not None and back.cached_from_host > 0
    assert back.cached_from_host <= back.cached_tokens
    [again] = generate(target, [first], 4)  # now on the device again
    assert again.cached_from_host == 0 and again.cached_tokens > 0
    assert generate(engine(), [first], 1)[0].cached_from_host is None  # no host tier


@pytest.mark.parametrize(("algorithm", "built"), [("DSPARK", True), ("EAGLE", False), (None, True)])
def test_the_prefill_graph_runner_is_built_only_where_the_configuration_keeps_it(algorithm, built):
    """The configuration-only path (issue 35, item 5): built for DSPARK or no speculative
    decoding, never for EAGLE; where built, every prefill goes through it and the numbers
    and cache hits are those of the eager prefill."""
    drafts = 4 if algorithm else None
    settings = {"speculative_algorithm": algorithm, "speculative_num_draft_tokens": drafts}
    graph = engine(**settings, cuda_graph_backend_prefill="breakable")
    assert (graph.prefill_graph is not None) is built
    assert graph.server_info()["cuda_graph_config"]["prefill"]["backend"] == (
        "breakable" if built else "disabled"
    )
    eager = engine(**settings)
    assert eager.prefill_graph is None
    outcomes = [prefill_cache_hit(target, PROMPTS[:6], 6) for target in (graph, eager)]
    assert outcomes[0] == outcomes[1] and outcomes[0].mismatched == 0
    if graph.prefill_graph is not None:
        assert graph.prefill_graph.batches > 0


def test_deterministic_inference_resolves_the_radix_cache_off_on_a_backend_without_it():
    from kl_bitexact.reference.config import EngineConfig, resolve

    asked = EngineConfig(enable_deterministic_inference=True, attention_backend="flashinfer")
    resolved, notes = resolve(asked)
    assert resolved.disable_radix_cache and "disable_radix_cache resolved to true" in notes[0]
    for kept in (
        EngineConfig(enable_deterministic_inference=True, attention_backend="fa3"),
        EngineConfig(attention_backend="flashinfer"),  # not deterministic: nothing to resolve
    ):
        assert resolve(kept) == (kept, ())


@pytest.mark.parametrize(("length", "healthy_hit"), [(65, 64), (81, 80), (129, 128), (60, 48)])
def test_cached_tokens_off_by_one_miscounts_only_a_hit_on_a_chunk_boundary(length, healthy_hit):
    """The count alone is one short (sglang PR 24910's `expected 4864, got 4863`): every
    token and logprob is the healthy engine's."""
    prompt = prompts(1, seed=length, low=length, high=length + 1)
    answers = {}
    for faults in (frozenset(), frozenset([Fault.CACHED_TOKENS_OFF_BY_ONE])):
        target = engine(
            page_size=16, mamba_track_interval=16, chunked_prefill_size=64, faults=faults
        )
        generate(target, prompt, 0)
        answers[faults] = generate(target, prompt, 6)[0]
    healthy, faulty = answers.values()
    assert healthy.cached_tokens == healthy_hit
    on_boundary = healthy_hit % 64 == 0
    assert faulty.cached_tokens == healthy_hit - on_boundary
    assert (faulty.output_ids, faulty.output_logprobs) == (
        healthy.output_ids,
        healthy.output_logprobs,
    )

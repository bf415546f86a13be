"""Property: in deterministic mode, whatever the cache did, every logprob equals a fresh prefill."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_scenarios import engine, generate, replay

TOKENS = st.integers(min_value=0, max_value=319)


@st.composite
def geometries(draw: st.DrawFn) -> dict[str, object]:
    page = draw(st.sampled_from([1, 2, 4, 8, 16]))
    geometry: dict[str, object] = {
        "page_size": page,
        "mamba_track_interval": page * draw(st.integers(1, 3)),
        "chunked_prefill_size": page * draw(st.sampled_from([1, 2, 4])),
        "sliding_window_size": draw(st.integers(1, 40)),
    }
    if draw(st.booleans()):
        geometry |= {"enable_hierarchical_cache": True, "max_total_tokens": 96, "hicache_ratio": 8}
    if draw(st.booleans()):
        geometry |= {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 3}
    return geometry


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[str, int, list[int], int]]:
    """Turns: (kind, base index, suffix, new tokens); `continue` extends the previous turn."""
    turns = []
    for _ in range(draw(st.integers(2, 5))):
        kind = draw(st.sampled_from(["new", "continue", "batch"]))
        suffix = draw(st.lists(TOKENS, min_size=1, max_size=24))
        turns.append((kind, draw(st.integers(0, 1)), suffix, draw(st.integers(0, 6))))
    return turns


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    geometry=geometries(),
    bases=st.lists(st.lists(TOKENS, min_size=16, max_size=80), min_size=2, max_size=2),
    turns=conversations(),
)
def test_cached_path_equals_fresh_prefill_exactly(geometry, bases, turns):
    cached = engine(**geometry)
    # The window is part of the model; everything else about the cache is switched off.
    fresh = engine(disable_radix_cache=True, sliding_window_size=geometry["sliding_window_size"])
    history: list[int] = []
    for kind, base, suffix, new in turns:
        prompt = (history if kind == "continue" and history else bases[base]) + suffix
        batch = [prompt, bases[1 - base] + suffix] if kind == "batch" else [prompt]
        results = generate(cached, batch, new)
        for sent, result in zip(batch, results, strict=True):
            if new:
                sequence = sent + list(result.output_ids)
                assert tuple(result.output_logprobs) == replay(fresh, [sequence], new)[0]
        history = prompt + list(results[0].output_ids)


@settings(max_examples=10, deadline=None)
@given(prompt=st.lists(TOKENS, min_size=2, max_size=60), others=st.integers(0, 3))
def test_batch_shape_does_not_change_a_prompt_logprobs(prompt, others):
    target = engine()
    alone = generate(target, [prompt], 0, start=0)[0]
    neighbours = [[(token + i + 1) % 320 for token in prompt] for i in range(others)]
    together = generate(target, [*neighbours, prompt], 0, start=0)[-1]
    assert together.input_logprobs == alone.input_logprobs

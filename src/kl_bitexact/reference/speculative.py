"""Speculative decoding: a draft proposes K tokens, the target verifies them in one pass.

The draft is the target model with a perturbed head (self-speculation), so it agrees with
the target most of the time and is wrong sometimes. A proposal is accepted while it equals
the token the target samples at the same position with the same noise, so the returned
tokens and logprobs are those of ordinary decoding. As in sglang, the last verify commits
its whole accepted block: up to K tokens beyond `max_new_tokens` enter the cache (their
keys and states were computed) but are not returned - the overshoot that made sglang lower
its decode hit ratio to 0.90 (PR 35293).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kl_bitexact.reference.numerics import Array
from kl_bitexact.reference.run import Run
from kl_bitexact.reference.sampling import noise

if TYPE_CHECKING:
    from kl_bitexact.reference.engine import ReferenceEngine

DRAFT_NOISE = 0.6
DRAFT_SALT = 0x5EED


def decode(engine: ReferenceEngine, runs: list[Run]) -> None:
    active = [run for run in runs if not run.done]
    while active:
        drafts = _draft(engine, active)
        _verify(engine, active, drafts)
        active = [run for run in active if not run.done]


def _draft(engine: ReferenceEngine, runs: list[Run]) -> list[list[int]]:
    states = [run.state for run in runs]
    saved = [(state.length, state.recurrent.copy()) for state in states]
    proposals: list[list[int]] = [[] for _ in runs]
    previous = [run.outputs[-1] for run in runs]
    for step in range(engine.config.draft_tokens):
        hidden, _ = engine.model.extend(states, [[t] for t in previous], [frozenset()] * len(runs))
        table = engine.model.logprobs(np.concatenate(hidden))
        for i, run in enumerate(runs):
            previous[i] = _guess(engine, table[i], run, run.position + step)
            proposals[i].append(previous[i])
    for state, (length, recurrent) in zip(states, saved, strict=True):
        state.rewind(length, recurrent)
    return proposals


def _guess(engine: ReferenceEngine, logprobs: Array, run: Run, position: int) -> int:
    request = run.request
    blurred = logprobs + DRAFT_NOISE * noise(request.seed ^ DRAFT_SALT, position, logprobs.size)
    return engine.vocabulary.sample(blurred, request.temperature, request.seed, position)


def _verify(engine: ReferenceEngine, runs: list[Run], drafts: list[list[int]]) -> None:
    width = engine.config.draft_tokens + 1
    states = [run.state for run in runs]
    starts = [state.length for state in states]
    befores = [state.recurrent.copy() for state in states]
    chunks = [[run.outputs[-1], *draft] for run, draft in zip(runs, drafts, strict=True)]
    capture = [frozenset(range(start + 1, start + width + 1)) for start in starts]
    hidden, captured = engine.model.extend(states, chunks, capture)
    table = engine.model.logprobs(np.concatenate(hidden))
    for i, run in enumerate(runs):
        accepted = 0
        for row in range(width):
            token = engine.sample_into(run, table[i * width + row])
            if run.stopped or row == width - 1 or token != drafts[i][row]:
                break
            accepted += 1
        consumed = starts[i] + 1 + accepted
        engine.track(run, engine.track_policy.take(starts[i], consumed, captured[i], befores[i]))
        run.state.rewind(consumed, captured[i][consumed])


def cache_overshoot_as_returned(
    run: Run, checkpoints: dict[int, Array], page_size: int
) -> dict[int, Array]:
    """The `spec-overshoot-cached` fault: when the last verify consumed tokens beyond the
    returned ones, the final recurrent state (which includes them) is cached at the last
    page boundary of the returned tokens, as if the overshoot had been returned. A follow-up
    turn then resumes from a state that saw tokens it never sent."""
    prompt_len = len(run.request.input_ids)
    returned_end = prompt_len + min(len(run.outputs), run.request.max_new_tokens)
    label = returned_end // page_size * page_size
    if run.state.length <= returned_end or label <= prompt_len:
        return checkpoints
    return {**checkpoints, label: run.state.recurrent.copy()}

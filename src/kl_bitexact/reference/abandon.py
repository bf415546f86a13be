"""Chunked prefill that notices a client who has gone, and what the cache keeps of it.

sglang prefills a long prompt one chunk (`--chunked-prefill-size`) per scheduler step and
aborts a request whose client disconnected between steps. A healthy abort caches only what
was really computed: the whole pages of the finished chunks, with the checkpoints taken at
their boundaries. Fault.REUSE_AFTER_ABANDONED_PREFILL (after sglang PR 38355, a chunked-
prefill radix insert racing an abort) inserts the prompt as if its prefill had completed:
the pages past the last finished chunk hold keys never written, and the recurrent state of
the last finished chunk is labelled as the state at each later boundary - so the next
request with that prefix reuses garbage, until a flush.

The engine asks `gone()` (the HTTP layer looks at the client's socket) after each chunk but
the last; in exact arithmetic feeding a prompt chunk by chunk gives the same bits as one
feed, so a request whose client stays is served exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kl_bitexact.reference.faults import Fault

if TYPE_CHECKING:
    from kl_bitexact.reference.checkpoints import CheckpointPolicy
    from kl_bitexact.reference.engine import ReferenceEngine
    from kl_bitexact.reference.run import Run


@dataclass
class Abandoned(Exception):
    """The client went away mid-prefill: the request was dropped after `done` of `total`
    chunks (`fed` of `prompt` tokens computed); `cached` says what the cache kept."""

    done: int
    total: int
    fed: int
    prompt: int
    cached: str

    def __str__(self) -> str:
        return (
            f"client disconnected after prefill chunk {self.done} of {self.total} "
            f"({self.fed} of {self.prompt} prompt tokens computed): request abandoned, "
            f"{self.cached}"
        )


def prefill_watching(
    engine: ReferenceEngine,
    run: Run,
    track: CheckpointPolicy | None,
    gone: Callable[[], bool],
) -> None:
    """Feed `run`'s prompt chunk by chunk up to the chunk holding the first position whose
    logprob is scored (the rest is the engine's ordinary prefill), asking `gone()` after
    each chunk; raise Abandoned, once the cache has what it keeps, when the client left."""
    size = engine.config.chunked_prefill_size
    request = run.request
    cut = request.logprob_start // size * size
    total = -(-(len(request.input_ids) - run.state.length) // size)
    done = 0
    while run.state.length < cut:
        start = run.state.length
        _feed(engine, run, track, start, min((start // size + 1) * size, cut))
        done += 1
        if gone():
            fed = run.state.length
            cached = _cache_abandoned(engine, run)
            raise Abandoned(done, total, fed, len(request.input_ids), cached)


def _feed(
    engine: ReferenceEngine, run: Run, track: CheckpointPolicy | None, start: int, end: int
) -> None:
    """Tokens start..end of the prompt, their checkpoints kept as the whole prefill keeps them."""
    before = run.state.recurrent.copy()
    tracked = track.capture(start, end) if track else frozenset()
    capture = engine.prefill_policy.capture(start, end) | tracked
    chunk = run.request.input_ids[start:end]
    _, [captured] = engine.model.extend([run.state], [chunk], [capture])
    run.checkpoints.update(engine.prefill_policy.take(start, end, captured, before))
    if track is not None:
        engine.track(run, track.take(start, end, captured, before))


def _cache_abandoned(engine: ReferenceEngine, run: Run) -> str:
    """Insert what an abort leaves in the cache; say what that was."""
    config = engine.config
    if config.disable_radix_cache:
        return "nothing cached (radix cache disabled)"
    checkpoints = run.cache_checkpoints()
    if not config.has(Fault.REUSE_AFTER_ABANDONED_PREFILL):
        engine.cache.insert(run.request.input_ids, run.state, checkpoints)
        return f"its {run.state.length // config.page_size} computed page(s) cached"
    fed, prompt = run.state.length, len(run.request.input_ids)
    stale = run.state.recurrent.copy()
    whole = prompt // config.page_size * config.page_size
    for position in (*engine.prefill_policy.positions(fed, prompt), whole):
        if position > fed and position % config.page_size == 0:
            checkpoints[position] = stale
    run.state.length = max(whole, fed)  # as if every page had been written
    engine.cache.insert(run.request.input_ids, run.state, checkpoints)
    return f"{whole // config.page_size} page(s) cached as if complete (fault)"

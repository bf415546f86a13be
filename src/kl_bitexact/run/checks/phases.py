"""Cold phases shared between the checks of one suite on one server launch.

A cold phase is a request that reuses no cached prefix (`SamplingParams.cold`; engines
flush for it where they cannot say so per request): a turn-1 generation or a replay. Its
answer depends only on what is sent, so a later check sending the same prompts with the
same sampling on the same launch can take the answer instead of asking again: `match`
after a `decode_cache_hit` with the same prompts reuses its turn 1, and a replay of the
very sequences replayed before (a bit-exact `prefill_cache_hit` replays what `match`
did) is not sent twice.

A check that needs the cache state a phase leaves behind (decode_cache_hit's turn 2
resumes from turn 1's) runs that phase itself; `generate_cold` always sends. The runner
keeps one `Phases` per suite, so a relaunched server never sees an answer of the last one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kl_bitexact.run.checks.metrics import Sample
from kl_bitexact.run.engines.base import Engine, Generation, Replay, SamplingParams, TokenIds

Batch = tuple[tuple[int, ...], ...]


class Phases:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._generated: dict[tuple[Batch, SamplingParams], list[Generation]] = {}
        # Each replay with the `last` it was asked for.
        self._replayed: dict[Batch, tuple[int | None, list[Replay]]] = {}
        self.reused = 0  # requests answered from an earlier phase (benchmarks print it)
        # The samples the last check scored (`run_check` clears it first); the flake meter
        # compares them between repeats of a test.
        self.scored: tuple[Sample, ...] = ()

    def generate_cold(
        self, prompts: Sequence[TokenIds], params: SamplingParams
    ) -> list[Generation]:
        """Generate reusing no cached prefix; the cache is left holding what this
        generation stored."""
        answers = self.engine.generate(prompts, dataclasses.replace(params, cold=True))
        self._generated[(_batch(prompts), params)] = answers
        return list(answers)

    def cold_outputs(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        """The answers of a cold generation, reused if one ran; the cache state after
        this call is unspecified (the next cold phase reuses nothing of it)."""
        earlier = self._generated.get((_batch(prompts), params))
        if earlier is None:
            return self.generate_cold(prompts, params)
        self.reused += 1
        return list(earlier)

    def replay_cold(
        self, sequences: Sequence[TokenIds], *, last: int | None = None
    ) -> list[Replay]:
        """Replay (a fresh prefill of each sequence), reused if one ran that scored at
        least the last `last` positions (`Engine.replay`)."""
        key = _batch(sequences)
        earlier = self._replayed.get(key)
        if earlier is not None and _covers(earlier[0], last):
            self.reused += 1
            return list(earlier[1])
        answers = self.engine.replay(key, last=last)
        self._replayed[key] = (last, answers)
        return list(answers)


def _covers(scored: int | None, needed: int | None) -> bool:
    """Whether a replay of the last `scored` positions (None: all) holds the last `needed`."""
    return scored is None or (needed is not None and needed <= scored)


def _batch(prompts: Sequence[TokenIds]) -> Batch:
    return tuple(tuple(prompt) for prompt in prompts)

"""Send a workload through an engine adapter and check every generated token against an
uncached replay of the same sequence: exactly on a deterministic server, by the noise-floor
rule (`explore/floor.py`) on one that is not."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kl_bitexact.explore import floor, pressure
from kl_bitexact.explore.floor import FloorVerdict
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.hits import Miscount, miscounts
from kl_bitexact.explore.workload import APART, TOGETHER, Batch, Pressure, Tokens, Workload
from kl_bitexact.run.engines.abandon import HangsUp
from kl_bitexact.run.engines.apart import SendsApart
from kl_bitexact.run.engines.base import Engine, Generation, SamplingParams

# Sequences are cut to this many tokens (prompt and answer), well inside any context.
MAX_SEQUENCE = 2048
# Pressure prompts go to the server this many to a request.
PRESSURE_BATCH = 16
# How long a request hung up on may keep the server busy before the next step goes out.
HANG_UP_WAIT_S = 60.0


@dataclass(frozen=True)
class Served:
    """One request as the server answered it, with the batch it was served in."""

    step: int
    slot: int  # its place in the batch
    prompt: tuple[int, ...]
    generation: Generation
    batch_cached: tuple[int | None, ...]  # cached_tokens of every request of its batch
    sent: str = TOGETHER  # workload.SENDS: in one call, or apart
    hung_up_before: int = 0  # requests hung up on mid-prefill since the last flush


@dataclass(frozen=True)
class Divergence:
    """The first generated token whose logprob differs from the uncached replay's."""

    served: Served
    position: int  # index among the generated tokens
    decoded: float
    replayed: float
    # On a server that is not deterministic: the workload's KL over its noise floor (this
    # is the first differing token of the request with the largest KL).
    rule: FloorVerdict | None = None

    def as_dict(self, geometry: Geometry) -> dict[str, Any]:
        located = locate(self, geometry)
        if self.rule is not None:
            return {
                "kind": "noise_floor",
                **self._where(),
                "noise_floor": self.rule.as_dict(),
                "located": f"{located}; {self.rule.failure}",
            }
        return {"kind": "tokens", **self._where(), "located": located}

    def _where(self) -> dict[str, Any]:
        return {
            "step": self.served.step,
            "slot": self.served.slot,
            "prompt_tokens": len(self.served.prompt),
            "cached_tokens": self.served.generation.cached_tokens,
            "batch_cached_tokens": list(self.served.batch_cached),
            "generated_token": self.position,
            "decoded_logprob": self.decoded,
            "replayed_logprob": self.replayed,
        }


def locate(divergence: Divergence, geometry: Geometry) -> str:
    """The divergence in words, against the geometry."""
    served = divergence.served
    cached = served.generation.cached_tokens
    hit = "no cached_tokens reported" if cached is None else f"cached prefix {cached} tokens"
    if cached:
        hit += f" ({geometry.describe(cached)})"
    host = served.generation.cached_from_host
    if host:
        hit += f", {host} of them restored from the host tier"
    others = [c for i, c in enumerate(served.batch_cached) if i != served.slot]
    cold = sum(1 for c in others if c == 0)
    warm = len(others) - cold
    apart = " (sent apart, concurrently)" if served.sent == APART else ""
    hung_up = ""
    if served.hung_up_before:
        hung_up = f", after {served.hung_up_before} request(s) hung up on mid-prefill"
    return (
        f"generated token {divergence.position} of a {len(served.prompt)}-token prompt, "
        f"{hit}, in a batch{apart} with {cold} cold and {warm} cached other request(s)"
        f"{hung_up}"
    )


# What explore finds: a token that differs from its replay, or a cache hit the geometry
# does not allow.
Finding = Divergence | Miscount


@dataclass(frozen=True)
class Outcome:
    served: tuple[Served, ...]
    divergences: tuple[Divergence, ...]
    miscounts: tuple[Miscount, ...] = ()
    abandoned: tuple[tuple[int, ...], ...] = ()  # the prompts hung up on, in order
    # The noise-floor rule's verdict (a server that is not deterministic); None: exact.
    floor: FloorVerdict | None = None

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Diverging tokens first (the stronger proof), then miscounted hits."""
        return (*self.divergences, *self.miscounts)


def execute(engine: Engine, workload: Workload, tokens: Tokens, geometry: Geometry) -> Outcome:
    """Run `workload` from an empty cache, judging each request's cached_tokens against the
    geometry, then replay every answered sequence uncached and compare."""
    engine.flush()
    served: list[Served] = []
    # Every prompt's sequence so far, in order (continuations name them): an abandoned
    # prompt's is the prompt alone.
    sequences: list[tuple[int, ...]] = []
    cached_since_flush: list[tuple[int, ...]] = []
    wrong: list[Miscount] = []
    hung_up = 0
    abandoned: list[tuple[int, ...]] = []
    for step_index, step in enumerate(workload.steps):
        if isinstance(step, Pressure):
            cached_since_flush += press(engine, step, step_index, tokens, geometry)
            continue
        if not isinstance(step, Batch):
            engine.flush()
            cached_since_flush, hung_up = [], 0
            continue
        prompts = _prompts(step, tokens, sequences)
        if not step.answered:
            _hang_up(engine, prompts, step.max_new_tokens)
            sequences += prompts
            cached_since_flush += prompts  # the server may keep what it computed
            hung_up += len(prompts)
            abandoned += prompts
            continue
        batch = _serve(engine, step, step_index, prompts, hung_up)
        wrong += miscounts(geometry, batch, cached_since_flush)
        served += batch
        answered = [s.prompt + s.generation.output_ids for s in batch]
        sequences += answered
        cached_since_flush += answered
    divergences, verdict = _judge(engine, served, geometry)
    return Outcome(tuple(served), divergences, tuple(wrong), tuple(abandoned), verdict)


def _judge(
    engine: Engine, served: list[Served], geometry: Geometry
) -> tuple[tuple[Divergence, ...], FloorVerdict | None]:
    """Every answered sequence replayed uncached: each request's first differing token on
    a deterministic server; the noise-floor rule's verdict on one that is not."""
    replays = _replays(engine, served)
    differing = _differences(served, replays)
    if geometry.deterministic:
        return tuple(differing), None
    return _by_floor(engine, served, replays, differing)


def _by_floor(
    engine: Engine,
    served: list[Served],
    replays: list[tuple[float | None, ...]],
    differing: list[Divergence],
) -> tuple[tuple[Divergence, ...], FloorVerdict]:
    """The requests that reused a prefix (or did not say) against their noise floor: one
    divergence, on the request with the largest KL, when the workload is over the rule."""
    judged = [i for i, s in enumerate(served) if s.generation.cached_tokens != 0]
    cached = [(served[i].generation.output_logprobs, replays[i]) for i in judged]
    cold = _cold_pairs(engine, [served[i] for i in judged], [replays[i] for i in judged])
    verdict = floor.judge(cached, cold)
    if verdict.failure is None:
        return (), verdict
    largest = max(range(len(judged)), key=lambda j: floor.request_kl(cached[j]) or 0.0)
    # Its KL is above 0, so one of its tokens differs from the replay.
    first = next(d for d in differing if d.served is served[judged[largest]])
    return (replace(first, rule=verdict),), verdict


def _cold_pairs(
    engine: Engine, served: list[Served], replays: list[tuple[float | None, ...]]
) -> list[tuple[tuple[float | None, ...], tuple[float | None, ...]]]:
    """The floor: each request's prompt generated again cold and alone (explore's prompts
    share prefixes, which a cold batch could still serve one another), paired with the
    replay of what it generated (the cached path's replay when the output is the same)."""
    colds = [
        engine.generate([s.prompt], _params(len(s.generation.output_ids), cold=True))[0]
        for s in served
    ]
    changed = [i for i, c in enumerate(colds) if c.output_ids != served[i].generation.output_ids]
    again = iter(_replays(engine, [replace(served[i], generation=colds[i]) for i in changed]))
    fresh = {i: next(again) for i in changed}
    return [(c.output_logprobs, fresh.get(i, replays[i])) for i, c in enumerate(colds)]


def press(
    engine: Engine, step: Pressure, step_index: int, tokens: Tokens, geometry: Geometry
) -> list[tuple[int, ...]]:
    """Send the step's pressure prompts (fresh tokens, no new ones); the prompts sent."""
    sent = pressure_prompts(step, step_index, tokens, geometry)
    params = SamplingParams(max_new_tokens=0, temperature=0.0, seed=0)
    for first in range(0, len(sent), PRESSURE_BATCH):
        engine.generate(sent[first : first + PRESSURE_BATCH], params)
    return sent


def pressure_prompts(
    step: Pressure, step_index: int, tokens: Tokens, geometry: Geometry
) -> list[tuple[int, ...]]:
    """The prompts a Pressure step sends (the same for the same seed)."""
    lengths = pressure.prompt_lengths(geometry, step.quarters)
    return [tuple(tokens.filler(step_index, i, n)) for i, n in enumerate(lengths)]


def _prompts(step: Batch, tokens: Tokens, earlier: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    prompts: list[tuple[int, ...]] = []
    for prompt in step.prompts:
        built = tokens.prompt(prompt, len(earlier) + len(prompts), earlier)
        prompts.append(tuple(built[-(MAX_SEQUENCE - step.max_new_tokens) :]))
    return prompts


def _params(max_new_tokens: int, *, cold: bool = False) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=0, cold=cold)


def _hang_up(engine: Engine, prompts: list[tuple[int, ...]], max_new_tokens: int) -> None:
    """Each prompt on its own connection, hung up on as soon as it is sent; each waited for
    (bounded) until the server is done with it, so the next step meets what it cached."""
    assert isinstance(engine, HangsUp), "abandoned batches are drawn only for such adapters"
    for prompt in prompts:
        engine.hang_up(prompt, _params(max_new_tokens), after_s=0.0, wait_s=HANG_UP_WAIT_S)


def _serve(
    engine: Engine, step: Batch, step_index: int, prompts: list[tuple[int, ...]], hung_up: int
) -> list[Served]:
    params = _params(step.max_new_tokens)
    if step.sent == APART:
        assert isinstance(engine, SendsApart), "batches apart are drawn only for such adapters"
        answers = engine.generate_apart(prompts, params)
    else:
        answers = engine.generate(prompts, params)
    cached = tuple(answer.cached_tokens for answer in answers)
    return [
        Served(step_index, slot, prompt, answer, cached, step.sent, hung_up)
        for slot, (prompt, answer) in enumerate(zip(prompts, answers, strict=True))
    ]


def _replays(engine: Engine, served: list[Served]) -> list[tuple[float | None, ...]]:
    """Each request's sequence (prompt + answer) replayed uncached in one call: the logprobs
    aligned with its decoded tokens."""
    if not served:
        return []
    sequences = [s.prompt + s.generation.output_ids for s in served]
    last = max(len(s.generation.output_ids) for s in served)
    replays = engine.replay(sequences, last=last)
    return [
        replay.last(len(s.generation.output_logprobs))
        for s, replay in zip(served, replays, strict=True)
    ]


def _differences(served: list[Served], replays: list[tuple[float | None, ...]]) -> list[Divergence]:
    """Each request's first generated token whose logprob differs from its replay's."""
    found = []
    for item, replayed in zip(served, replays, strict=True):
        decoded = item.generation.output_logprobs
        for position, (ours, theirs) in enumerate(zip(decoded, replayed, strict=True)):
            if ours is not None and theirs is not None and ours != theirs:
                found.append(Divergence(item, position, ours, theirs))
                break
    return found


def handed_back_fails(
    engine: Engine, prompts: list[tuple[int, ...]], max_new_tokens: int
) -> tuple[bool, tuple[int | None, ...]]:
    """Run the phases of the handed-back `prefill_cache_hit` test (warm the prompts cold,
    generate them in one batch, replay uncached): whether a token diverges, and each
    prompt's cached_tokens."""
    engine.generate(prompts, SamplingParams(max_new_tokens=0, temperature=0.0, cold=True))
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    answers = engine.generate(prompts, params)
    cached = tuple(answer.cached_tokens for answer in answers)
    served = [
        Served(0, slot, prompt, answer, cached)
        for slot, (prompt, answer) in enumerate(zip(prompts, answers, strict=True))
    ]
    return bool(_differences(served, _replays(engine, served))), cached

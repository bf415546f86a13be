"""The noise-floor rule, for a server that is not deterministic (pure).

On such a server a decode differs from the prefill that replays it, cache or not, so a
token that differs from its replay proves nothing. A workload is then judged as `run`
judges a cache test under `gate: noise-floor`: the requests that reused a cached prefix
(or did not say) are each generated again cold, alone, and scored against the same kind of
replay; that is the floor, the engine's drift on the very same prompts with no cache
involved. The workload diverges when the cached path's average KL exceeds
`floor_factor` x the floor's KL + `floor_margin`: `NoiseFloor.failure`, the one statement
of the rule `run` and `report` apply, with `run`'s defaults (TestSpec's). A request the
server says reused nothing (`cached_tokens` 0) is generated as the floor itself is, and is
not judged.

What the rule cannot judge is said, never passed: a floor or a cached path that compared
no logprob, a floor that is infinite (the uncached path itself diverges), or a workload in
which no request reused anything (`cannot_tell`; `verdict.py` says which of these reasons
make a run "cannot tell": all but the last, where the cache path was not reached).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kl_bitexact.results.aggregate import KL_INFINITE, average
from kl_bitexact.results.model import NoiseFloor
from kl_bitexact.run.checks.metrics import k3
from kl_bitexact.suite.model import TestSpec

# `run`'s defaults for `gate: noise-floor` (a test that gives no floor_factor/margin).
FACTOR = TestSpec.floor_factor
MARGIN = TestSpec.floor_margin

Logprobs = Sequence[float | None]
# One request's decoded logprobs and its replay's, aligned.
Pair = tuple[Logprobs, Logprobs]

NO_HIT = "no request reused a cached prefix: the rule has no cached path to judge"
FLOOR_EMPTY = "the noise floor compared no logprob (the server reported none)"
FLOOR_INFINITE = "the noise floor is infinite: the uncached path itself diverges"
CACHED_EMPTY = "the cached path compared no logprob (the server reported none)"


@dataclass(frozen=True)
class FloorVerdict:
    """A workload judged by the noise floor: the cached path's KL, the floor's, and why the
    workload is over the rule (`failure`) or could not be judged (`cannot_tell`)."""

    kl: float | None
    floor: NoiseFloor
    requests: int  # requests judged (those that reused a prefix, or did not say)
    failure: str | None = None
    cannot_tell: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": "noise-floor",
            "kl": self.kl,
            "floor_kl": self.floor.kl,
            "ratio": self.floor.ratio,
            "factor": self.floor.factor,
            "margin": self.floor.margin,
            "requests_judged": self.requests,
            "logprobs_compared": self.floor.tokens,
            "failure": self.failure,
            "cannot_tell": self.cannot_tell,
        }


def judge(cached: Sequence[Pair], cold: Sequence[Pair]) -> FloorVerdict:
    """The cached path's pairs against the floor's (the same requests generated cold)."""
    kl, _ = _average_kl(cached)
    floor_kl, compared = _average_kl(cold)
    floor = NoiseFloor(
        kl=floor_kl,
        tokens=compared,
        ratio=kl / floor_kl if kl is not None and floor_kl else None,
        factor=FACTOR,
        margin=MARGIN,
    )
    why = _cannot_tell(len(cached), kl, floor)
    if why:
        return FloorVerdict(kl, floor, len(cached), cannot_tell=why)
    return FloorVerdict(kl, floor, len(cached), failure=floor.failure(kl))


def _cannot_tell(requests: int, kl: float | None, floor: NoiseFloor) -> str | None:
    if requests == 0:
        return NO_HIT
    if floor.kl is None:
        return FLOOR_EMPTY
    if not math.isfinite(floor.kl) or floor.kl >= KL_INFINITE:  # saturated: no bound
        return FLOOR_INFINITE
    if kl is None:
        return CACHED_EMPTY
    return None


def share_of_bound(verdict: FloorVerdict) -> float | None:
    """The cached path's KL as a share of the rule's bound (factor x floor + margin): how
    near a judged workload came to diverging (1 and over: it did)."""
    if verdict.cannot_tell or verdict.kl is None or verdict.floor.kl is None:
        return None
    bound = FACTOR * verdict.floor.kl + MARGIN
    return verdict.kl / bound if bound > 0 else None


def request_kl(pair: Pair) -> float | None:
    """One request's KL over the positions both sides reported; None when there are none."""
    decode, replay = _reported(pair)
    return k3(decode, replay) if decode else None


def _average_kl(pairs: Sequence[Pair]) -> tuple[float | None, int]:
    """The average over requests of their KL (as `run` averages samples), and the number
    of logprobs compared; None when no request compared any."""
    reported = [_reported(pair) for pair in pairs]
    kls = [k3(decode, replay) for decode, replay in reported if decode]
    compared = sum(len(decode) for decode, _ in reported)
    return (average(kls) if kls else None), compared


def _reported(pair: Pair) -> tuple[list[float], list[float]]:
    both = [(a, b) for a, b in zip(*pair, strict=True) if a is not None and b is not None]
    return [a for a, _ in both], [b for _, b in both]


def rule(deterministic: bool) -> dict[str, Any]:
    """How explore judges tokens on this server (results.json's `rule`)."""
    if deterministic:
        return {"name": "bit-exact"}
    return {"name": "noise-floor", "factor": FACTOR, "margin": MARGIN}


def rule_text(deterministic: bool) -> str:
    if deterministic:
        return "every generated token must equal its uncached replay's bit for bit"
    return (
        "the server is not deterministic: a workload diverges when its cached requests' "
        f"avg KL > {FACTOR:g} x their noise floor (the same prompts generated cold) "
        f"+ {MARGIN:g}, the rule of `run`'s gate: noise-floor"
    )

"""A workload: steps of batches and flushes, prompts built from shared roots (pure).

A prompt is named, not spelled: `shared` tokens of root `root` (so prompts of one root
share a prefix of the shorter length), then `own` tokens of its own. A continuation starts
from an earlier prompt's whole sequence (prompt and answer), as a next chat turn does.
Tokens follow from the names and a seed, so a workload stays small to shrink and print.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

ROOTS = 2


@dataclass(frozen=True)
class Prompt:
    root: int
    shared: int
    own: int
    salt: int = 0
    # Index (over the workload's prompts so far, in order) of the earlier prompt whose
    # sequence this one continues; None: it starts from its root.
    continues: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "shared": self.shared,
            "own": self.own,
            "salt": self.salt,
            "continues": self.continues,
        }


# How a batch's prompts are sent: in one /generate call; each on its own connection, all at
# once (real concurrent requests, which the server may or may not put in one step); or each
# on its own connection that the client hangs up on at once, mid-prefill (nothing comes back,
# but what the server cached of it is there for the steps after).
TOGETHER, APART, ABANDONED = "together", "apart", "abandoned"
SENDS = (TOGETHER, APART, ABANDONED)


@dataclass(frozen=True)
class Batch:
    prompts: tuple[Prompt, ...]
    max_new_tokens: int
    sent: str = TOGETHER

    @property
    def answered(self) -> bool:
        return self.sent != ABANDONED


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Pressure:
    """Fresh prompts of `quarters` / 4 x the server's device pool, no new tokens: everything
    cached before them is evicted (to the host tier, where there is one)."""

    quarters: int


Step = Batch | Flush | Pressure


@dataclass(frozen=True)
class Workload:
    steps: tuple[Step, ...]

    @property
    def requests(self) -> int:
        return sum(len(step.prompts) for step in self.steps if isinstance(step, Batch))

    @property
    def abandoned(self) -> bool:
        return any(isinstance(step, Batch) and step.sent == ABANDONED for step in self.steps)

    def as_list(self) -> list[dict[str, Any]]:
        return [_step_dict(step) for step in self.steps]


def _step_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Flush):
        return {"flush": True}
    if isinstance(step, Pressure):
        return {"pressure": step.quarters / 4}
    prompts = [prompt.as_dict() for prompt in step.prompts]
    shown: dict[str, Any] = {"batch": prompts, "max_new_tokens": step.max_new_tokens}
    return shown if step.sent == TOGETHER else {**shown, "sent": step.sent}


class Tokens:
    """Token ids for the prompts of one workload, drawn in [1, vocab) from `seed`."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        self.vocab_size = vocab_size
        self.seed = seed

    def root(self, root: int, length: int) -> list[int]:
        return self._draw(f"root-{root}", length)

    def own(self, salt: int, index: int, length: int) -> list[int]:
        return self._draw(f"own-{salt}-{index}", length)

    def filler(self, step: int, index: int, length: int) -> list[int]:
        """Pressure prompt `index` of step `step`: tokens no workload prompt shares."""
        return self._draw(f"fill-{step}-{index}", length)

    def _draw(self, name: str, length: int) -> list[int]:
        rng = random.Random(f"{self.seed}-{name}")
        return [rng.randrange(1, self.vocab_size) for _ in range(length)]

    def prompt(self, prompt: Prompt, index: int, earlier: Sequence[Sequence[int]]) -> list[int]:
        """Prompt number `index` of the workload; `earlier`: every earlier prompt's whole
        sequence (prompt and answer), in order."""
        if prompt.continues is not None and earlier:
            start = list(earlier[prompt.continues % len(earlier)])
        else:
            start = self.root(prompt.root, prompt.shared)
        own = max(prompt.own, 0 if start else 1)  # never an empty prompt
        return start + self.own(prompt.salt, index, own)


def smaller(workload: Workload) -> Iterator[Workload]:
    """Each workload with one step, or one prompt of a batch, left out, continuations
    still naming the prompts they named: the candidates of a greedy pass after
    Hypothesis's shrinker, which can stop with prompts that play no part in the failure
    (it cannot renumber the continuations)."""
    positions = _positions(workload)
    steps = workload.steps
    for index, step in enumerate(steps if len(steps) > 1 else ()):
        if not isinstance(step, Batch):
            yield Workload((*steps[:index], *steps[index + 1 :]))
        else:
            yield _without(workload, set(positions[index]))
    for index, step in enumerate(steps):
        if isinstance(step, Batch) and len(step.prompts) > 1:
            for position in positions[index]:
                yield _without(workload, {position})


def _positions(workload: Workload) -> list[list[int]]:
    """The flat index of each step's prompts (a flush has none)."""
    found, count = [], 0
    for step in workload.steps:
        size = len(step.prompts) if isinstance(step, Batch) else 0
        found.append(list(range(count, count + size)))
        count += size
    return found


def _without(workload: Workload, gone: set[int]) -> Workload:
    """`workload` without the prompts at the flat indices `gone` (a batch left empty goes)."""
    steps: list[Step] = []
    position = earlier = 0
    for step in workload.steps:
        if not isinstance(step, Batch):
            steps.append(step)
            continue
        kept = []
        for prompt in step.prompts:
            if position not in gone:
                kept.append(_renamed(prompt, earlier, gone))
            position += 1
        earlier += len(step.prompts)
        if kept:
            steps.append(replace(step, prompts=tuple(kept)))
    return Workload(tuple(steps))


def _renamed(prompt: Prompt, earlier: int, gone: set[int]) -> Prompt:
    """`prompt` continuing the same earlier prompt once the prompts `gone` are left out
    (from its root when that prompt is gone)."""
    if prompt.continues is None or earlier == 0:
        return replace(prompt, continues=None)
    target = prompt.continues % earlier
    if target in gone:
        return replace(prompt, continues=None)
    return replace(prompt, continues=target - sum(1 for index in gone if index < target))

"""A workload: steps of batches and flushes, prompts built from shared roots (pure).

A prompt is named, not spelled: `shared` tokens of root `root` (so prompts of one root
share a prefix of the shorter length), then `own` tokens of its own. A continuation starts
from an earlier prompt's whole sequence (prompt and answer), as a next chat turn does.
Tokens follow from the names and a seed, so a workload stays small to shrink and print.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Batch:
    prompts: tuple[Prompt, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class Flush:
    pass


Step = Batch | Flush


@dataclass(frozen=True)
class Workload:
    steps: tuple[Step, ...]

    @property
    def requests(self) -> int:
        return sum(len(step.prompts) for step in self.steps if isinstance(step, Batch))

    def as_list(self) -> list[dict[str, Any]]:
        return [_step_dict(step) for step in self.steps]


def _step_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Flush):
        return {"flush": True}
    prompts = [prompt.as_dict() for prompt in step.prompts]
    return {"batch": prompts, "max_new_tokens": step.max_new_tokens}


class Tokens:
    """Token ids for the prompts of one workload, drawn in [1, vocab) from `seed`."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        self.vocab_size = vocab_size
        self.seed = seed

    def root(self, root: int, length: int) -> list[int]:
        return self._draw(f"root-{root}", length)

    def own(self, salt: int, index: int, length: int) -> list[int]:
        return self._draw(f"own-{salt}-{index}", length)

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

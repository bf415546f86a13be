"""Prompts for a check: seeded synthetic token ids, or the suite's file of token lists.

Synthetic ids need no tokenizer and no data set; a fixed seed makes every run (and the
base branch's run) send the same tokens. Ids start above the low range where tokenizers
keep their special tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kl_bitexact.suite.model import TestSpec

if TYPE_CHECKING:
    import numpy as np

Prompt = tuple[int, ...]


def vocab_size(spec: TestSpec, info: Mapping[str, Any]) -> int:
    """The suite's vocab_size, narrowed to the server's when the server reports one."""
    reported = info.get("vocab_size")
    if isinstance(reported, int) and not isinstance(reported, bool) and reported > 1:
        return min(spec.vocab_size, reported)
    return spec.vocab_size


def token_ids(rng: np.random.Generator, count: int, vocab: int) -> Prompt:
    low = min(100, vocab // 2)
    return tuple(int(token) for token in rng.integers(low, vocab, size=count))


def single_turn(spec: TestSpec, info: Mapping[str, Any]) -> list[Prompt]:
    """`samples` prompts, lengths drawn from the `prompt_tokens` range."""
    if spec.prompts is not None:
        return list(spec.prompts[: spec.samples])
    import numpy as np  # for seeded ids only: a suite's prompts file needs no numpy (0.2 s)

    rng = np.random.default_rng(spec.seed)
    vocab = vocab_size(spec, info)
    low, high = spec.prompt_tokens
    lengths = rng.integers(low, high + 1, size=spec.samples)
    return [token_ids(rng, int(length), vocab) for length in lengths]

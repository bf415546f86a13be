"""The served vocabulary: the model's head scores 320 token classes; a larger vocabulary
spreads each class over several token ids.

sglang's test files draw token ids up to ~30000 (and real tokenizers have 150k+), but a head
as wide as that would cost every decode step a 64 x 32k product and a 32k-wide softmax. So
the head stays 320 wide, and with `--vocab-size N` token id `t` belongs to class `t % 320`
with a small integer weight `w[t]` (1 for ids below 320, 1..3 from the seed above):

    p(t) = p(class) * w[t] / W(class),  W(class) = the sum of its members' weights

`log_softmax` over the classes is normalised by `sum exp(logit) * W` (numerics.py, exact
in deterministic mode), so `class_logprobs[c] + log w[t]` is `log p(t)`. A token's logprob
is one lookup and sampling draws a class then a member, so a step costs the same whatever
N is; only the embedding table (N x 64) grows. With N = 320 every class has one member of
weight 1 and the model is exactly the one served before the flag existed.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from kl_bitexact.reference.numerics import Array
from kl_bitexact.reference.sampling import noise, sample

# The head's width: token classes the model scores.
HEAD_CLASSES = 320
MAX_VOCAB_SIZE = 1 << 18
_MEMBER_SALT = 0x70CAB
_MAX_WEIGHT = 3


class Vocabulary:
    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        weights = np.ones(size, dtype=np.int64)
        rng = np.random.default_rng([seed, _MEMBER_SALT])
        weights[HEAD_CLASSES:] = rng.integers(1, _MAX_WEIGHT + 1, size - HEAD_CLASSES)
        self.weights = weights
        self.log_weight = np.log(weights.astype(np.float64))
        classes = np.arange(size) % HEAD_CLASSES
        # W(class), the normaliser's multipliers; None when every class is one token.
        self.class_weight: NDArray[np.int64] | None = (
            np.bincount(classes, weights=weights, minlength=HEAD_CLASSES).astype(np.int64)
            if self.factored
            else None
        )
        self.members = [np.arange(c, size, HEAD_CLASSES) for c in range(HEAD_CLASSES)]
        heaviest = [int(members[np.argmax(weights[members])]) for members in self.members]
        self._heaviest = np.asarray(heaviest, dtype=np.int64)

    @property
    def factored(self) -> bool:
        return self.size > HEAD_CLASSES

    def logprob(self, class_logprobs: Array, token: int) -> float:
        """log p(token) from one row of class log-probabilities."""
        if not self.factored:
            return float(class_logprobs[token])
        return float(class_logprobs[token % HEAD_CLASSES] + self.log_weight[token])

    def sample(self, class_logprobs: Array, temperature: float, seed: int, position: int) -> int:
        """A token id at `temperature` (0 = greedy): a class, then a member of it."""
        if not self.factored:
            return sample(class_logprobs, temperature, seed, position)
        if temperature == 0:
            best = class_logprobs + self.log_weight[self._heaviest]
            return int(self._heaviest[int(np.argmax(best))])
        # The class's share of p^(1/T) is exp(logprob/T) * sum(w^(1/T)) over its members.
        scores = class_logprobs + temperature * self._class_log_mass(temperature)
        chosen = sample(scores, temperature, seed, position)
        members = self.members[chosen]
        inner = self.log_weight[members] / temperature + _member_noise(seed, position, len(members))
        return int(members[int(np.argmax(inner))])

    @functools.lru_cache(maxsize=8)  # noqa: B019 - one engine, a handful of temperatures
    def _class_log_mass(self, temperature: float) -> Array:
        scaled = self.weights.astype(np.float64) ** (1.0 / temperature)
        classes = np.arange(self.size) % HEAD_CLASSES
        return np.log(np.bincount(classes, weights=scaled, minlength=HEAD_CLASSES))


def _member_noise(seed: int, position: int, size: int) -> Array:
    # A stream of its own, so the class draw is the one an unfactored vocabulary makes.
    return noise(seed ^ _MEMBER_SALT, position, size)

"""Token sampling: Gumbel-max with noise fixed by (seed, position).

Keying the noise by position, not by call order, makes a sampled token a function of the
distribution and its position only, so speculative decoding (which draws the same positions
in a different order) returns exactly the tokens of ordinary decoding.
"""

from __future__ import annotations

import numpy as np

from kl_bitexact.reference.numerics import Array


def noise(seed: int, position: int, size: int) -> Array:
    rng = np.random.default_rng([seed, position])
    return np.asarray(rng.gumbel(size=size))


def sample(scores: Array, temperature: float, seed: int, position: int) -> int:
    """A token from log-probabilities or logits `scores` at `temperature` (0 = greedy)."""
    if temperature == 0:
        return int(np.argmax(scores))
    perturbed = np.asarray(scores, dtype=np.float64) / temperature + noise(
        seed, position, scores.shape[-1]
    )
    return int(np.argmax(perturbed))

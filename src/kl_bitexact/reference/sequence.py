"""One request's model state: attention keys/values per position and the recurrent state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.floating]


@dataclass(frozen=True)
class StateShape:
    """Sizes of the per-sequence state, fixed by the model architecture."""

    full_layers: int
    window_layers: int
    recurrent_layers: int
    head_dim: int
    state_dim: int


class SequenceState:
    """Keys/values of every fed position and the recurrent state after the last one.

    `length` tokens have been fed. Sliding-window keys exist only from `window_start` on:
    a prefix restored from the cache carries just the window it needs.
    """

    def __init__(self, shape: StateShape, capacity: int, dtype: type[np.floating]) -> None:
        self.full_kv: Array = np.zeros(
            (shape.full_layers, 2, capacity, shape.head_dim), dtype=dtype
        )
        self.window_kv: Array = np.zeros(
            (shape.window_layers, 2, capacity, shape.head_dim), dtype=dtype
        )
        self.recurrent: Array = np.zeros((shape.recurrent_layers, shape.state_dim), dtype=dtype)
        self.length = 0
        self.window_start = 0

    def rewind(self, length: int, recurrent: Array) -> None:
        """Forget positions from `length` on (rejected speculative tokens)."""
        self.length = length
        self.recurrent = recurrent.copy()

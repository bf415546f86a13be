"""A small hybrid language model in numpy: full attention, sliding-window attention and a
diagonal linear state-space layer (a Mamba-like recurrent state that cannot be rebuilt from
a KV prefix), each followed by an MLP. Weights come from a fixed seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kl_bitexact.reference.numerics import WEIGHT_BITS, Array, Numerics
from kl_bitexact.reference.sequence import SequenceState, StateShape
from kl_bitexact.reference.vocabulary import HEAD_CLASSES

FULL, WINDOW, RECURRENT = "full", "window", "recurrent"


@dataclass(frozen=True)
class ModelSpec:
    # Token ids served; the head scores HEAD_CLASSES classes (vocabulary.py).
    vocab_size: int = HEAD_CLASSES
    d_model: int = 64
    head_dim: int = 32
    state_dim: int = 32
    mlp_dim: int = 128
    layers: tuple[str, ...] = (FULL, WINDOW, RECURRENT)
    sliding_window: int = 32
    eos_token_id: int = 0

    def state_shape(self) -> StateShape:
        return StateShape(
            full_layers=self.layers.count(FULL),
            window_layers=self.layers.count(WINDOW),
            recurrent_layers=self.layers.count(RECURRENT),
            head_dim=self.head_dim,
            state_dim=self.state_dim,
        )

    def slot(self, layer: int) -> int:
        """Index of `layer` among the layers of its own kind."""
        return self.layers[:layer].count(self.layers[layer])


@dataclass(frozen=True)
class LayerWeights:
    mixer_in: tuple[Array, ...]  # attention: q, k, v projections; recurrent: input projection
    mixer_out: Array
    decay: Array  # recurrent layers only (empty otherwise)
    mlp_in: Array
    mlp_out: Array


@dataclass(frozen=True)
class Weights:
    embedding: Array
    layers: tuple[LayerWeights, ...]
    head: Array


def _on_grid(values: NDArray[np.float64]) -> Array:
    """Round onto the weight grid, so both numerics see exactly the same weights."""
    scale = float(2**WEIGHT_BITS)
    return np.clip(np.rint(values * scale) / scale, -1 + 1 / scale, 1 - 1 / scale)


def init_weights(spec: ModelSpec, seed: int) -> Weights:
    rng = np.random.default_rng(seed)

    def dense(rows: int, cols: int, gain: float = 1.0) -> Array:
        return _on_grid(rng.normal(0.0, gain / np.sqrt(rows), size=(rows, cols)))

    layers = []
    for kind in spec.layers:
        if kind == RECURRENT:
            mixer_in: tuple[Array, ...] = (dense(spec.d_model, spec.state_dim),)
            mixer_out = dense(spec.state_dim, spec.d_model)
            decay = _on_grid(rng.uniform(0.80, 0.99, size=spec.state_dim))
        else:
            mixer_in = tuple(dense(spec.d_model, spec.head_dim) for _ in range(3))
            mixer_out = dense(spec.head_dim, spec.d_model)
            decay = np.zeros(0)
        layers.append(
            LayerWeights(
                mixer_in=mixer_in,
                mixer_out=mixer_out,
                decay=decay,
                mlp_in=dense(spec.d_model, spec.mlp_dim),
                mlp_out=dense(spec.mlp_dim, spec.d_model),
            )
        )
    embedding = _on_grid(rng.normal(0.0, 0.5, size=(HEAD_CLASSES, spec.d_model)))
    head = dense(spec.d_model, HEAD_CLASSES, gain=2.5)
    if spec.vocab_size > HEAD_CLASSES:
        # Drawn after the head, so the first 320 ids keep the weights they always had.
        extra = rng.normal(0.0, 0.5, size=(spec.vocab_size - HEAD_CLASSES, spec.d_model))
        embedding = np.concatenate([embedding, _on_grid(extra)])
    return Weights(embedding=embedding, layers=tuple(layers), head=head)


Captures = dict[int, Array]
# Window-layer queries are processed in blocks this long, so a long prefill costs
# O(n * (block + window)) instead of O(n^2); exact arithmetic makes blocking invisible.
WINDOW_BLOCK = 64


def _prepared(layer: LayerWeights, numerics: Numerics) -> LayerWeights:
    return LayerWeights(
        mixer_in=tuple(numerics.prepare(w) for w in layer.mixer_in),
        mixer_out=numerics.prepare(layer.mixer_out),
        decay=layer.decay,
        mlp_in=numerics.prepare(layer.mlp_in),
        mlp_out=numerics.prepare(layer.mlp_out),
    )


class Model:
    """The forward pass over new tokens of several sequences at once.

    Position-wise work (projections, MLPs, the head) runs on all new rows of the batch as
    one matrix; attention and the recurrent scan run per sequence over its own history.
    """

    def __init__(
        self,
        spec: ModelSpec,
        weights: Weights,
        numerics: Numerics,
        class_weight: NDArray[np.int64] | None = None,
    ) -> None:
        self.spec = spec
        self.class_weight = class_weight
        self.numerics = numerics
        dtype = numerics.dtype
        self.embedding = weights.embedding.astype(dtype)
        self.layers = tuple(_prepared(layer, numerics) for layer in weights.layers)
        self.head = numerics.prepare(weights.head)

    def new_state(self, capacity: int) -> SequenceState:
        return SequenceState(self.spec.state_shape(), capacity, self.numerics.dtype)

    def extend(
        self,
        states: Sequence[SequenceState],
        chunks: Sequence[Sequence[int]],
        capture: Sequence[frozenset[int]],
    ) -> tuple[list[Array], list[Captures]]:
        """Feed `chunks[i]` to `states[i]`; return final hidden rows per sequence and the
        recurrent states captured after each position listed in `capture[i]`."""
        x = self.embedding[np.concatenate([np.asarray(c, dtype=np.int64) for c in chunks])]
        bounds = np.cumsum([0, *(len(chunk) for chunk in chunks)])
        captured: list[Captures] = [{} for _ in states]
        for index, kind in enumerate(self.spec.layers):
            normed = self.numerics.rms_norm(x)
            if kind == RECURRENT:
                mixed = self._recurrent(index, normed, states, bounds, capture, captured)
            else:
                mixed = self._attention(index, normed, states, bounds)
            x = x + mixed
            x = x + self._mlp(self.layers[index], x)
        for state, chunk in zip(states, chunks, strict=True):
            state.length += len(chunk)
        final = self.numerics.rms_norm(x)
        return [final[bounds[i] : bounds[i + 1]] for i in range(len(states))], captured

    def logprobs(self, hidden: Array) -> Array:
        """Class log-probabilities for each hidden row (per token: vocabulary.py)."""
        logits = self.numerics.matmul(hidden, self.head)
        return self.numerics.log_softmax(logits, self.class_weight)

    def _mlp(self, layer: LayerWeights, x: Array) -> Array:
        hidden = np.maximum(self.numerics.matmul(self.numerics.rms_norm(x), layer.mlp_in), 0)
        return self.numerics.matmul(hidden, layer.mlp_out)

    def _attention(
        self,
        index: int,
        normed: Array,
        states: Sequence[SequenceState],
        bounds: NDArray[np.int64],
    ) -> Array:
        layer = self.layers[index]
        q, k, v = (self.numerics.matmul(normed, w) for w in layer.mixer_in)
        windowed = self.spec.layers[index] == WINDOW
        slot = self.spec.slot(index)
        outputs = []
        for i, state in enumerate(states):
            rows = slice(bounds[i], bounds[i + 1])
            store = state.window_kv if windowed else state.full_kv
            start, end = state.length, state.length + (bounds[i + 1] - bounds[i])
            store[slot, 0, start:end] = k[rows]
            store[slot, 1, start:end] = v[rows]
            step = WINDOW_BLOCK if windowed else end - start
            for first in range(start, end, step):
                last = min(first + step, end)
                block = q[bounds[i] + first - start : bounds[i] + last - start]
                outputs.append(self._attend(block, store[slot], first, last, state, windowed))
        return self.numerics.matmul(np.concatenate(outputs), layer.mixer_out)

    def _attend(
        self, q: Array, store: Array, start: int, end: int, state: SequenceState, windowed: bool
    ) -> Array:
        """Queries at positions start..end-1 over the keys they may see."""
        low = max(0, start - self.spec.sliding_window + 1) if windowed else 0
        mask = self._mask(start, end, low, state.window_start if windowed else 0, windowed)
        return self.numerics.attention(q, store[0, low:end], store[1, low:end], mask)

    def _mask(
        self, start: int, end: int, low: int, present_from: int, windowed: bool
    ) -> NDArray[np.bool_]:
        queries = np.arange(start, end)[:, None]
        keys = np.arange(low, end)[None, :]
        mask = (keys <= queries) & (keys >= present_from)
        if windowed:
            mask &= keys > queries - self.spec.sliding_window
        # A query always sees itself, even when the restored window is incomplete.
        return np.asarray(mask | (keys == queries))

    def _recurrent(
        self,
        index: int,
        normed: Array,
        states: Sequence[SequenceState],
        bounds: NDArray[np.int64],
        capture: Sequence[frozenset[int]],
        captured: list[Captures],
    ) -> Array:
        layer = self.layers[index]
        dtype = self.numerics.dtype
        decay = layer.decay.astype(dtype)
        keep = (1 - decay).astype(dtype)
        inputs = self.numerics.matmul(normed, layer.mixer_in[0]).astype(dtype)
        slot = self.spec.slot(index)
        outputs = np.empty_like(inputs)
        for i, state in enumerate(states):
            h = state.recurrent[slot]
            for row in range(bounds[i], bounds[i + 1]):
                h = decay * h + keep * inputs[row]
                outputs[row] = h
                position = state.length + row - bounds[i] + 1
                if position in capture[i]:
                    snapshot = captured[i].setdefault(position, state.recurrent.copy())
                    snapshot[slot] = h
            state.recurrent[slot] = h
        return self.numerics.matmul(outputs, layer.mixer_out)

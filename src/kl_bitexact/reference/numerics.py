"""The arithmetic the model runs on: exact (batch-invariant) or plain float32 BLAS.

Deterministic mode must give the same bits for a position whatever the batch shape, the
chunking or the cached prefix. Instead of fixing a reduction order by hand, every reduction
is made exact: operands are rounded onto a fixed binary grid and multiplied in float64,
where all products and partial sums are integers far below 2**53, so any summation order
(any BLAS kernel, any blocking) gives the same result. Only element-wise rounding remains,
and that does not depend on shape. The plain mode is the straightforward float32 BLAS
computation whose last bits may move with the shape of the matrices, as real engines do.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.floating]

# Weights live on this grid in both modes (13 bits of mantissa at most, exact in float32).
WEIGHT_BITS = 12
# Grids for activations entering a product. Every exact product checks that no partial
# sum can reach 2**53 (in practice sums stay below 2**45).
ACTIVATION_BITS = 12
QK_BITS = 10
PROB_BITS = 20
VOCAB_PROB_BITS = 40
EPS = 1e-6


EXACT_LIMIT = float(2**53)


def _grid(x: Array, bits: int) -> Array:
    return np.rint(np.asarray(x, dtype=np.float64) * float(2**bits))


def _exact_product(a: Array, b: Array) -> Array:
    """a @ b for integer-valued float64 operands, refused if some order could round."""
    bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * a.shape[-1]
    if bound >= EXACT_LIMIT:
        raise ArithmeticError(f"deterministic arithmetic would round: a sum may reach {bound:.3g}")
    return np.asarray(a @ b)


class Numerics(Protocol):
    """The few reductions the model needs; everything else is element-wise."""

    dtype: type[np.floating]

    def prepare(self, weight: Array) -> Array:
        """A weight matrix in the form `matmul` takes (done once, at load)."""
        ...

    def matmul(self, x: Array, weight: Array) -> Array: ...

    def rms_norm(self, x: Array) -> Array: ...

    def attention(self, q: Array, k: Array, v: Array, mask: NDArray[np.bool_]) -> Array: ...

    def log_softmax(self, logits: Array, class_weight: NDArray[np.int64] | None = None) -> Array:
        """Log-probabilities; with `class_weight`, column c stands for W[c] tokens sharing its
        logit (vocabulary.py) and the result is normalised over all of them."""
        ...


class ExactNumerics:
    """Batch-invariant arithmetic for `--enable-deterministic-inference`."""

    dtype: type[np.floating] = np.float64

    def prepare(self, weight: Array) -> Array:
        return _grid(weight, WEIGHT_BITS)

    def matmul(self, x: Array, weight: Array) -> Array:
        scale = 2.0 ** -(ACTIVATION_BITS + WEIGHT_BITS)
        return _exact_product(_grid(x, ACTIVATION_BITS), weight) * scale

    def rms_norm(self, x: Array) -> Array:
        grid = _grid(x, ACTIVATION_BITS)
        squares = _exact_product(grid * grid, np.ones((x.shape[-1], 1)))
        mean = squares * (2.0 ** (-2 * ACTIVATION_BITS)) / x.shape[-1]
        return np.asarray(x / np.sqrt(mean + EPS))

    def attention(self, q: Array, k: Array, v: Array, mask: NDArray[np.bool_]) -> Array:
        scale = 2.0 ** (-2 * QK_BITS) / np.sqrt(q.shape[-1])
        scores = _exact_product(_grid(q, QK_BITS), _grid(k, QK_BITS).T) * scale
        weights = _grid(_masked_exp(scores, mask), PROB_BITS)
        total = weights.sum(axis=-1, keepdims=True)
        return np.asarray(_exact_product(weights, _grid(v, QK_BITS)) / total * (2.0**-QK_BITS))

    def log_softmax(self, logits: Array, class_weight: NDArray[np.int64] | None = None) -> Array:
        top = logits.max(axis=-1, keepdims=True)
        grid = _grid(np.exp(logits - top), VOCAB_PROB_BITS)
        if class_weight is None:
            mass = grid.sum(axis=-1, keepdims=True)
        else:
            # Up to 2**40 x a few hundred x 320 classes passes 2**53: summed in int64, exact
            # in any order, then rounded once.
            weighted = grid.astype(np.int64) * class_weight
            mass = weighted.sum(axis=-1, keepdims=True).astype(np.float64)
        return np.asarray(logits - (top + np.log(mass * (2.0**-VOCAB_PROB_BITS))))


class BlasNumerics:
    """Plain float32 BLAS: fast, and its last bits may depend on matrix shapes."""

    dtype: type[np.floating] = np.float32

    def prepare(self, weight: Array) -> Array:
        return np.asarray(weight, dtype=np.float32)

    def matmul(self, x: Array, weight: Array) -> Array:
        return np.asarray(x, dtype=np.float32) @ weight

    def rms_norm(self, x: Array) -> Array:
        mean = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return np.asarray(x / np.sqrt(mean + np.float32(EPS)), dtype=np.float32)

    def attention(self, q: Array, k: Array, v: Array, mask: NDArray[np.bool_]) -> Array:
        scores = (q @ k.T) * np.float32(1.0 / np.sqrt(q.shape[-1]))
        weights = _masked_exp(scores, mask)
        return np.asarray((weights @ v) / weights.sum(axis=-1, keepdims=True), dtype=np.float32)

    def log_softmax(self, logits: Array, class_weight: NDArray[np.int64] | None = None) -> Array:
        shifted = logits - logits.max(axis=-1, keepdims=True)
        exp = np.exp(shifted)
        if class_weight is not None:
            exp = exp * class_weight.astype(np.float32)
        return np.asarray(shifted - np.log(exp.sum(axis=-1, keepdims=True)), dtype=np.float32)


def _masked_exp(scores: Array, mask: NDArray[np.bool_]) -> Array:
    """exp(score - row max) where allowed, exactly 0 elsewhere (every row allows one key)."""
    masked = np.where(mask, scores, -np.inf)
    return np.asarray(np.exp(masked - masked.max(axis=-1, keepdims=True)))


def numerics_for(deterministic: bool) -> Numerics:
    return ExactNumerics() if deterministic else BlasNumerics()

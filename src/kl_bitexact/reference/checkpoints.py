"""Which recurrent states are saved, and under which position (the off-by-one fault lives here)."""

from __future__ import annotations

from dataclasses import dataclass

from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.model import Captures
from kl_bitexact.reference.numerics import Array


@dataclass(frozen=True)
class CheckpointPolicy:
    interval: int
    off_by_one: bool

    @staticmethod
    def chunks(size: int, faults: frozenset[Fault]) -> CheckpointPolicy:
        """Prefill: the state at every chunk boundary (sglang's chunked prefill)."""
        return CheckpointPolicy(size, Fault.CHECKPOINT_OFF_BY_ONE in faults)

    @staticmethod
    def track(interval: int, faults: frozenset[Fault]) -> CheckpointPolicy:
        """Decode: the state every `--mamba-track-interval` tokens."""
        return CheckpointPolicy(interval, Fault.CHECKPOINT_OFF_BY_ONE in faults)

    def positions(self, start: int, end: int) -> list[int]:
        """Checkpoint positions q (tokens consumed) with start < q <= end."""
        first = (start // self.interval + 1) * self.interval
        return list(range(first, end + 1, self.interval))

    def capture(self, start: int, end: int) -> frozenset[int]:
        """The positions whose states the model must capture for a feed of start..end."""
        wanted = self.positions(start, end)
        return frozenset(q - 1 if self.off_by_one else q for q in wanted)

    def take(self, start: int, end: int, captured: Captures, before: Array) -> dict[int, Array]:
        """States to save, labelled by position; `before` is the state at `start`."""
        saved = {}
        for q in self.positions(start, end):
            source = q - 1 if self.off_by_one else q
            saved[q] = before if source == start else captured[source]
        return saved

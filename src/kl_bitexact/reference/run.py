"""One request in flight: its sequence state, the tokens it has produced, its checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kl_bitexact.reference.numerics import Array
from kl_bitexact.reference.protocol import GenerateRequest, GenerateResult
from kl_bitexact.reference.sequence import SequenceState


@dataclass
class Run:
    request: GenerateRequest
    state: SequenceState
    cached_tokens: int
    cached_from_host: int | None = None  # None: no host tier
    # Log-probabilities of the token at `position` (the next one to sample).
    next_logprobs: Array | None = None
    input_logprobs: tuple[float | None, ...] = ()
    # Committed tokens; speculative decoding may commit more than max_new_tokens.
    outputs: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False
    # Recurrent states to cache, by position (tokens consumed).
    checkpoints: dict[int, Array] = field(default_factory=dict)
    # sglang keeps only the latest decode-tracked state of a request.
    last_track: tuple[int, Array] | None = None

    @property
    def position(self) -> int:
        return len(self.request.input_ids) + len(self.outputs)

    @property
    def done(self) -> bool:
        return self.stopped or len(self.outputs) >= self.request.max_new_tokens

    def commit(self, token: int, logprob: float, eos_token_id: int) -> None:
        self.outputs.append(token)
        self.logprobs.append(logprob)
        if token == eos_token_id and not self.request.ignore_eos:
            self.stopped = True

    def tokens(self) -> tuple[int, ...]:
        return self.request.input_ids + tuple(self.outputs)

    def cache_checkpoints(self) -> dict[int, Array]:
        tracked = dict(self.checkpoints)
        if self.last_track is not None:
            tracked[self.last_track[0]] = self.last_track[1]
        return tracked

    def result(self) -> GenerateResult:
        count = min(len(self.outputs), self.request.max_new_tokens)
        return GenerateResult(
            output_ids=tuple(self.outputs[:count]),
            output_logprobs=tuple(self.logprobs[:count]),
            input_logprobs=self.input_logprobs,
            cached_tokens=self.cached_tokens,
            finish_reason=self._finish_reason(count),
            cached_from_host=self.cached_from_host,
        )

    def _finish_reason(self, count: int) -> Mapping[str, Any]:
        # An EOS committed only in speculative overshoot was never returned.
        if self.stopped and len(self.outputs) <= self.request.max_new_tokens:
            return {"type": "stop", "matched": self.outputs[count - 1]}
        return {"type": "length", "length": count}

"""The small interface every engine adapter implements, and the values it returns.

Checks are written against `Engine` only, so the same check runs unchanged against sglang's
native `/generate`, an OpenAI-compatible server (vLLM, llama.cpp) or the embedded reference
engine. An adapter translates; it never decides pass or fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

TokenIds = Sequence[int]


@dataclass(frozen=True)
class SamplingParams:
    """How to generate. `seed` maps to sglang's `sampling_seed` / OpenAI's `seed`."""

    max_new_tokens: int
    temperature: float = 1.0
    seed: int | None = None
    ignore_eos: bool = True


@dataclass(frozen=True)
class Generation:
    """One prompt's answer to a generate call."""

    output_ids: tuple[int, ...]
    # Logprob of each generated token as scored while decoding, one per output id.
    output_logprobs: tuple[float, ...]
    # Prompt tokens served from the prefix cache; None when the server cannot say
    # (a check that needs it must then report `not_run`, never guess).
    cached_tokens: int | None
    prompt_tokens: int
    finish_reason: str | None = None


@dataclass(frozen=True)
class Replay:
    """Logprobs of a token sequence scored by a prefill (no generation)."""

    # One entry per input token; position 0 has no logprob (None), as in sglang. A replay
    # asked for only its `last` positions may hold None for the positions before them.
    input_logprobs: tuple[float | None, ...]
    cached_tokens: int | None

    def last(self, count: int) -> tuple[float, ...]:
        """The logprobs of the last `count` tokens (aligned with decoded tokens)."""
        if count > len(self.input_logprobs):
            raise ValueError(
                f"replay asked for the last {count} logprobs of {len(self.input_logprobs)} tokens"
            )
        tail = self.input_logprobs[len(self.input_logprobs) - count :]
        missing = [i for i, value in enumerate(tail) if value is None]
        if missing:
            position = len(self.input_logprobs) - count + missing[0]
            raise ValueError(
                f"replay has no logprob for position {position} (the first token has none, "
                "and a replay of only the last positions leaves earlier ones out)"
            )
        return tuple(float(value) for value in tail if value is not None)


def tail_start(length: int, last: int | None) -> int:
    """The first position whose logprob a replay of `length` tokens must score when only the
    `last` positions are needed (never position 0, which has no logprob)."""
    if last is None:
        return 1
    return max(1, length - last)


class Engine(Protocol):
    """What a check may ask of an inference server."""

    def server_info(self) -> Mapping[str, Any]:
        """The server's effective settings (sglang's /get_server_info keys where known:
        page_size, mamba_track_interval, disable_radix_cache, speculative_algorithm,
        speculative_num_draft_tokens, chunked_prefill_size)."""
        ...

    def flush(self) -> None:
        """Empty the prefix cache, so that the next request starts cold."""
        ...

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        """Generate for a batch of prompts; answers are in prompt order.
        `max_new_tokens=0` only fills the cache (a warm-up)."""
        ...

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        """Score each sequence by prefill, without using or filling the prefix cache
        where the engine allows it (the caller flushes first where it does not).

        `last`: only the logprobs of each sequence's last `last` positions are needed; an
        adapter may then answer None for earlier positions (every Replay keeps one entry per
        token), which spares engines that score one position per request most of the work."""
        ...

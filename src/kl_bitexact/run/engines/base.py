"""The small interface every engine adapter implements, and the values it returns.

Checks are written against `Engine` only, so the same check runs unchanged against sglang's
native `/generate`, an OpenAI-compatible server (vLLM, llama.cpp) or the embedded reference
engine. An adapter translates; it never decides pass or fail.
"""

from __future__ import annotations

import re
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
    # A cold request reuses no cached prefix: its answer depends on itself alone, while the
    # cache may keep what it computed (a later request can hit it). llama.cpp says so per
    # request (`cache_prompt: false`); sglang and vLLM flush the whole cache first.
    cold: bool = False


@dataclass(frozen=True)
class Generation:
    """One prompt's answer to a generate call."""

    output_ids: tuple[int, ...]
    # Logprob of each generated token as scored while decoding, one per output id; None
    # where the server scored the token but would not report it (llama.cpp withholds a
    # token that leaves its text in the middle of a UTF-8 character: docs/engines.md).
    output_logprobs: tuple[float | None, ...]
    # Prompt tokens served from the prefix cache; None when the server cannot say
    # (a check that needs it must then report `not_run`, never guess).
    cached_tokens: int | None
    prompt_tokens: int
    finish_reason: str | None = None
    # Of `cached_tokens`, those brought back from a host tier (sglang's
    # `cached_tokens_details.host`); None when the server does not say.
    cached_from_host: int | None = None


@dataclass(frozen=True)
class Replay:
    """Logprobs of a token sequence scored by a prefill (no generation)."""

    # One entry per input token; position 0 has no logprob (None), as in sglang. A replay
    # asked for only its `last` positions may hold None for the positions before them.
    input_logprobs: tuple[float | None, ...]
    cached_tokens: int | None
    # Positions the server scored but would not report (their entry is None), as
    # `Generation.output_logprobs`; told apart from positions a tail replay left out.
    unreported: frozenset[int] = frozenset()

    def last(self, count: int) -> tuple[float | None, ...]:
        """The logprobs of the last `count` tokens (aligned with decoded tokens); None
        where the server did not report one."""
        if count > len(self.input_logprobs):
            raise ValueError(
                f"replay asked for the last {count} logprobs of {len(self.input_logprobs)} tokens"
            )
        start = len(self.input_logprobs) - count
        tail = self.input_logprobs[start:]
        missing = [
            i for i, value in enumerate(tail) if value is None and start + i not in self.unreported
        ]
        if missing:
            raise ValueError(
                f"replay has no logprob for position {start + missing[0]} (the first token has "
                "none, and a replay of only the last positions leaves earlier ones out)"
            )
        return tail


def tail_start(length: int, last: int | None) -> int:
    """The first position whose logprob a replay of `length` tokens must score when only the
    `last` positions are needed (never position 0, which has no logprob)."""
    if last is None:
        return 1
    return max(1, length - last)


@dataclass(frozen=True)
class Identity:
    """Which engine build served a run, as the server itself says (None: it does not)."""

    version: str | None = None
    build: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class Reported:
    """What a server says of its own configuration, as it said it: the answer a test's
    stated facts are read from (run/facts.py). sglang: GET /server_info, the resolved server
    arguments; llama.cpp: GET /props; vLLM: GET /server_info (VLLM_SERVER_DEV_MODE=1)."""

    source: str  # where it was read, e.g. "GET /server_info"
    values: Mapping[str, Any]
    # When the server offers no such answer (values empty): why, and how to get one.
    why_none: str = ""


# Device lines in a server's log where its HTTP answers do not name the backend (llama.cpp:
# "using device CUDA0 (NVIDIA H200) (...) - N MiB free" at info verbosity; the build of
# llama-cpp-python 0.3.36 on the H200 logged only "layer 0 is assigned to device CUDA0").
_DEVICE_LINE = re.compile(
    r"using device ([\w.:-]+) \(([^)]*)\)|layer \d+ is assigned to device ([\w.:-]+)()"
)
MAX_IDENTITY_CHARS = 200


def identity(info: Mapping[str, Any], log_lines: Sequence[str] = ()) -> Identity:
    """The engine's version, build and backend from its `server_info` (keys `version`,
    `build`, `backend`; sglang's raw /server_info names the backend by `device` and
    `attention_backend`), the backend else from the device lines of its log."""
    backend = _text(info.get("backend"))
    if backend is None:
        parts = [_text(info.get("device")), _text(info.get("attention_backend"))]
        named = [part for part in parts if part]
        backend = ", attention ".join(named) if named else None
    if backend is None:
        backend = _devices(log_lines)
    return Identity(_text(info.get("version")), _text(info.get("build")), _text(backend))


def _devices(log_lines: Sequence[str]) -> str | None:
    """The devices a log names, in order, each with its description where one is given."""
    devices: dict[str, str] = {}
    for line in log_lines:
        for found in _DEVICE_LINE.finditer(line):
            name, description = found[1] or found[3], found[2]
            if description or name not in devices:
                devices[name] = f"{name} ({description})" if description else name
    return ", ".join(devices.values()) or None


def _text(value: Any) -> str | None:
    """A short one-line string of what a server sent (None when it sent nothing usable)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        return None
    return " ".join(str(value).split())[:MAX_IDENTITY_CHARS] or None


class Engine(Protocol):
    """What a check may ask of an inference server."""

    def server_info(self) -> Mapping[str, Any]:
        """The server's effective settings (sglang's /get_server_info keys where known:
        page_size, mamba_track_interval, disable_radix_cache, speculative_algorithm,
        speculative_num_draft_tokens, chunked_prefill_size)."""
        ...

    def reported(self) -> Reported:
        """The server's own account of its configuration, as it sent it (one request,
        asked once per adapter); a server that offers none says why in `why_none`, and a
        transport failure raises an EngineError."""
        ...

    def flush(self) -> None:
        """Empty the prefix cache. Only a check that needs an empty cache calls it (cold
        requests say so themselves: `SamplingParams.cold`); an engine that cannot flush
        raises an EngineError whose hint says how to start the server."""
        ...

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        """Generate for a batch of prompts; answers are in prompt order.
        `max_new_tokens=0` only fills the cache (a warm-up); `params.cold`: reuse nothing."""
        ...

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        """Score each sequence by a fresh prefill that reuses no cached prefix (engines
        without a per-request switch flush first).

        `last`: only the logprobs of each sequence's last `last` positions are needed; an
        adapter may then answer None for earlier positions (every Replay keeps one entry per
        token), which spares engines that score one position per request most of the work."""
        ...

"""An in-process Engine for unit tests of the check plans (not a server).

Logprobs are a pure function of the token prefix, so a fresh replay reproduces them
exactly; the prefix cache remembers sequences and reports page-aligned hits. `drift`
perturbs logprobs computed on top of a cache hit, the bug class the checks must catch;
`decode_drift` perturbs every decoded logprob, cache or not (an engine that is not
batch-invariant: a decode step rounds differently from the prefill that replays it).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from kl_bitexact.run.engines.base import Generation, Replay, Reported, SamplingParams


def _logprob(prefix: Sequence[int]) -> float:
    digest = hashlib.blake2b(repr(tuple(prefix)).encode(), digest_size=4).digest()
    return -0.1 - int.from_bytes(digest, "little") / 2**32 * 5


def _next_token(prefix: Sequence[int]) -> int:
    digest = hashlib.blake2b(repr(tuple(prefix)).encode(), digest_size=4, person=b"t").digest()
    return 100 + int.from_bytes(digest, "little") % 400


class FakeEngine:
    def __init__(
        self,
        *,
        page_size: int = 1,
        track_interval: int | None = None,
        disable_radix_cache: bool = False,
        drift: float = 0.0,
        decode_drift: float = 0.0,
        report_cached: bool = True,
        withhold: frozenset[int] = frozenset(),
    ) -> None:
        self.info: dict[str, Any] = {
            "page_size": page_size,
            "mamba_track_interval": track_interval,
            "disable_radix_cache": disable_radix_cache,
        }
        self.drift = drift
        self.decode_drift = decode_drift
        self.report_cached = report_cached
        # Token ids whose logprob is never reported, in generation or replay (as llama.cpp
        # withholds tokens that end mid-character).
        self.withhold = withhold
        self.cache: list[tuple[int, ...]] = []
        self.calls: list[str] = []

    def server_info(self) -> dict[str, Any]:
        return dict(self.info)

    def reported(self) -> Reported:
        return Reported("GET /server_info", dict(self.info))

    def flush(self) -> None:
        self.calls.append("flush")
        self.cache.clear()

    def _cached(self, prompt: tuple[int, ...]) -> int:
        if self.info["disable_radix_cache"]:
            return 0
        step = self.info["page_size"]
        if self.info["mamba_track_interval"]:
            step = math.lcm(step, self.info["mamba_track_interval"])
        best = 0
        for seq in self.cache:
            common = 0
            for a, b in zip(seq, prompt, strict=False):
                if a != b:
                    break
                common += 1
            best = max(best, min(common, len(prompt) - 1) // step * step)
        return best

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        if params.cold:  # as sglang: a cold request follows a flush
            self.flush()
        self.calls.append(f"generate({len(prompts)}, {params.max_new_tokens})")
        answers = []
        for raw in prompts:
            prompt = tuple(raw)
            cached = self._cached(prompt)
            seq = list(prompt)
            ids: list[int] = []
            lps: list[float | None] = []
            for _ in range(params.max_new_tokens):
                token = _next_token(seq)
                lp = _logprob([*seq, token]) + (self.drift if cached else 0.0) + self.decode_drift
                ids.append(token)
                lps.append(None if token in self.withhold else lp)
                seq.append(token)
            # the last sampled token is never fed back: its state is not cached
            self.cache.append(tuple(seq[:-1]) if ids else prompt)
            answers.append(
                Generation(
                    output_ids=tuple(ids),
                    output_logprobs=tuple(lps),
                    cached_tokens=cached if self.report_cached else None,
                    prompt_tokens=len(prompt),
                )
            )
        return answers

    def replay(
        self, sequences: Sequence[Sequence[int]], *, last: int | None = None
    ) -> list[Replay]:
        self.flush()  # as sglang: a replay follows a flush
        self.calls.append(f"replay({len(sequences)})")
        out = []
        for seq in sequences:
            lps: list[float | None] = [None]
            lps += [_logprob(seq[: k + 1]) for k in range(1, len(seq))]
            hidden = frozenset(k for k in range(1, len(seq)) if seq[k] in self.withhold)
            lps = [None if k in hidden else lp for k, lp in enumerate(lps)]
            out.append(Replay(tuple(lps), cached_tokens=0, unreported=hidden))
        return out

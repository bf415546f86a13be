"""The exact signal of a test file we may not edit: its server's answers, observed.

sglang's KL helpers print KL numbers only, and their thresholds are sized for bf16 noise on a
GPU (0.002-0.02): a cache fault that moves logprobs by 1e-5 stays green. The logprobs
themselves travel through `requests` (sglang's `_generate` and `_get_input_logprobs` call
`requests.post`), so under `kl-bitexact pytest` the plugin wraps `requests.Session.send` and
reads every `/generate` answer a test receives, untouched.

Pairing follows sglang's helpers: a replay is a request whose prompt is exactly an earlier
answer's prompt + output_ids (`new_input_ids = input_ids[i] + result["output_ids"]`) and
that scores at least those output positions (`logprob_start_len` low enough); its last
`len(output)` input logprobs are paired with that answer's decoded logprobs, once. Every
decode of that sequence still waiting is paired, not only the latest: a test that decodes
the same prompt twice (cached, then cold) and replays once compares both with the replay,
so a cached decode's differences are never hidden by a cold one after it. Tokens
of a turn's prompt that a replay scores again (an earlier turn's outputs) are not pairs, as
sglang does not compare them either. Counts and first divergences come from the same
functions `kl-bitexact run` uses (run/checks/metrics.py).

The observer never changes a request or an answer, and a body it cannot read is skipped
with a warning: the file's own verdict is untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kl_bitexact.results.model import Divergence, ExactMatch
from kl_bitexact.run.checks import metrics
from kl_bitexact.run.checks.metrics import Geometry, Sample

# Enough to localise a bug (as `run`'s checks).
MAX_DIVERGENCES = 8
# Decodes waiting for their replay, per test: a test that never replays cannot grow memory.
MAX_PENDING = 4096


@dataclass(frozen=True)
class Decoded:
    index: int  # the prompt's place in its request (its sample index, as in `run`)
    prompt_len: int
    cached_tokens: int | None
    logprobs: tuple[float | None, ...]
    output_ids: tuple[int, ...]


@dataclass
class TestObservation:
    """What one test's server answered: decodes awaiting a replay, and the pairs made."""

    __test__ = False  # not a pytest test class despite the name

    # Decodes by the sequence a replay of them scores (prompt + outputs), oldest first.
    pending: dict[bytes, list[Decoded]] = field(default_factory=dict)
    waiting: int = 0  # decodes in `pending`, all sequences together
    samples: list[Sample] = field(default_factory=list)
    geometry: Geometry = field(default_factory=Geometry)
    warnings: list[str] = field(default_factory=list)
    generated: int = 0  # `/generate` answers read
    # The server the test talked to (scheme://host:port) and its server-info answer when
    # the test asked for one itself: what `kl_expect` facts are read from (facts.py).
    server_url: str | None = None
    server_info: tuple[str, Mapping[str, Any]] | None = None

    def answered(self, path: str, request: Any, answer: Any) -> None:
        """One `/generate` exchange (request body and answer, parsed)."""
        if path.endswith("/server_info") or path.endswith("/get_server_info"):
            if isinstance(answer, Mapping):
                self.geometry = Geometry.from_server_info(answer)
                self.server_info = (f"GET {path}", answer)
            return
        self.generated += 1
        for index, prompt, start, reply in _prompts(request, answer):
            self._pair(prompt, start, reply)
            self._remember(index, prompt, reply)

    def _remember(self, index: int, prompt: tuple[int, ...], reply: Mapping[str, Any]) -> None:
        meta = reply.get("meta_info")
        outputs = reply.get("output_ids")
        if not isinstance(meta, Mapping) or not _ints(outputs) or not outputs:
            return
        logprobs = _logprobs(meta.get("output_token_logprobs"))
        if logprobs is None or len(logprobs) != len(outputs):
            return
        if self.waiting >= MAX_PENDING:
            self._forget_oldest()
        cached = meta.get("cached_tokens")
        decoded = Decoded(
            index=index,
            prompt_len=len(prompt),
            cached_tokens=cached if isinstance(cached, int) else None,
            logprobs=logprobs,
            output_ids=tuple(outputs),
        )
        self.pending.setdefault(_key((*prompt, *outputs)), []).append(decoded)
        self.waiting += 1

    def _forget_oldest(self) -> None:
        oldest = next(iter(self.pending))
        decodes = self.pending[oldest]
        decodes.pop(0)
        self.waiting -= 1
        if not decodes:
            del self.pending[oldest]

    def _pair(self, prompt: tuple[int, ...], start: int, reply: Mapping[str, Any]) -> None:
        """Every decode waiting for this sequence, each paired with the replay once."""
        decodes = self.pending.get(_key(prompt))
        meta = reply.get("meta_info")
        if not decodes or not isinstance(meta, Mapping):
            return
        scored = _logprobs(meta.get("input_token_logprobs"))
        # All decodes of one sequence have as many outputs (the key holds them).
        count = len(decodes[0].logprobs)
        if scored is None or start > len(prompt) - count or len(scored) < count:
            return
        del self.pending[_key(prompt)]
        self.waiting -= len(decodes)
        self.samples.extend(_sample(decoded, scored[-count:]) for decoded in decodes)

    def exact(self) -> ExactMatch | None:
        """Pairs compared and how many differ; None when nothing was paired."""
        if not self.samples:
            return None
        pairs = [sample.compared() for sample in self.samples]
        tokens = sum(len(compared) for compared in pairs)
        mismatched = sum(1 for compared in pairs for _, a, b in compared if a != b)
        not_reported = sum(sample.not_reported for sample in self.samples)
        return ExactMatch(tokens=tokens, mismatched=mismatched, not_reported=not_reported)

    def divergences(self) -> tuple[Divergence, ...]:
        found = (metrics.first_divergence(sample, self.geometry) for sample in self.samples)
        return tuple(d for d in found if d is not None)[:MAX_DIVERGENCES]

    def record(self, enforced: bool) -> dict[str, Any]:
        """The results.json fields this observation gives the test; `exact` null when
        nothing was paired, with `generated` saying how many answers were read."""
        exact = self.exact()
        if exact is None:
            return {
                "exact": None,
                "first_divergence": [],
                "samples": 0,
                "generated": self.generated,
                "warnings": self.warnings,
            }
        return {
            "exact": {
                "tokens": exact.tokens,
                "mismatched": exact.mismatched,
                "not_reported": exact.not_reported,
                "enforced": enforced,
            },
            "first_divergence": [_divergence_json(d) for d in self.divergences()],
            "samples": len(self.samples),
            "generated": self.generated,
            "warnings": self.warnings,
        }


def _sample(decoded: Decoded, replayed: tuple[float | None, ...]) -> Sample:
    return Sample(
        index=decoded.index,
        prompt_len=decoded.prompt_len,
        cached_tokens=decoded.cached_tokens,
        decode=decoded.logprobs,
        replay=replayed,
        output_ids=decoded.output_ids,
    )


def _divergence_json(divergence: Divergence) -> dict[str, Any]:
    return {
        "sample": divergence.sample,
        "token_index": divergence.token_index,
        "cached_tokens": divergence.cached_tokens,
        "decode_logprob": divergence.decode_logprob,
        "replay_logprob": divergence.replay_logprob,
        "hint": divergence.hint,
    }


def _prompts(
    request: Any, answer: Any
) -> Iterator[tuple[int, tuple[int, ...], int, Mapping[str, Any]]]:
    """(index, prompt, logprob_start_len resolved, answer) per prompt of a /generate."""
    if not isinstance(request, Mapping):
        return
    ids = request.get("input_ids")
    if _ints(ids) and ids and isinstance(answer, Mapping):
        prompts: Sequence[Any] = [ids]
        answers: Sequence[Any] = [answer]
    elif isinstance(ids, list) and isinstance(answer, list) and len(ids) == len(answer):
        prompts, answers = ids, answer
    else:
        return
    starts = request.get("logprob_start_len", -1)
    for index, (prompt, reply) in enumerate(zip(prompts, answers, strict=True)):
        start = starts[index] if isinstance(starts, list) and index < len(starts) else starts
        if not _ints(prompt) or not prompt or not isinstance(reply, Mapping):
            continue
        if not isinstance(start, int) or start < 0:
            start = len(prompt) - 1
        yield index, tuple(prompt), start, reply


def _logprobs(entries: Any) -> tuple[float | None, ...] | None:
    """The logprob of each `[logprob, token_id, text]` entry (None where not reported)."""
    if not isinstance(entries, list):
        return None
    values: list[float | None] = []
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or not entry:
            return None
        value = entry[0]
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return None
        values.append(None if value is None else float(value))
    return tuple(values)


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )


def _key(tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(json.dumps(list(tokens)).encode(), digest_size=16).digest()


# --- the tap on requests -------------------------------------------------------------------

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
MAX_WARNINGS = 5


class RequestsTap:
    """Wraps `requests.Session.send` for the pytest session: every exchange of the test in
    progress (`current`) with a `/generate` or server-info path is handed to it."""

    def __init__(self) -> None:
        self.current: TestObservation | None = None
        self._original: Any = None

    def install(self) -> None:
        import requests

        original = self._original = requests.Session.send
        tap = self

        def send(session: requests.Session, request: Any, **kwargs: Any) -> Any:
            response = original(session, request, **kwargs)
            if tap.current is not None and not kwargs.get("stream"):
                tap.saw(tap.current, request, response)
            return response

        requests.Session.send = send  # type: ignore[method-assign, assignment]

    def remove(self) -> None:
        """Put `requests` back as it was (in-process users; a pytest session keeps it)."""
        import requests

        if self._original is not None:
            requests.Session.send = self._original  # type: ignore[method-assign]
            self._original = None

    @staticmethod
    def saw(observation: TestObservation, request: Any, response: Any) -> None:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(request.url)
            path = parts.path
            if response.status_code != 200:
                return
            if path.endswith(("/generate", *SERVER_INFO_PATHS)):
                observation.server_url = f"{parts.scheme}://{parts.netloc}"
            if request.method == "POST" and path.endswith("/generate"):
                body = request.body
                parsed = json.loads(body) if isinstance(body, (bytes, str)) and body else None
                observation.answered(path, parsed, response.json())
            elif request.method == "GET" and path.endswith(SERVER_INFO_PATHS):
                observation.answered(path, None, response.json())
        except Exception as error:  # an answer it cannot read must not break the test
            if len(observation.warnings) < MAX_WARNINGS:
                observation.warnings.append(
                    f"kl-bitexact could not read an answer of {request.method} {request.url}: "
                    f"{type(error).__name__}"
                )

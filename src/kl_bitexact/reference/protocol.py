"""sglang's native /generate request and response, validated and shaped as sglang does.

Validation errors are `RequestError`s whose message names the offending field; the HTTP
layer answers them with 400 and keeps serving.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class RequestError(ValueError):
    """A malformed request: answered with HTTP 400 and this message."""


@dataclass(frozen=True)
class GenerateRequest:
    input_ids: tuple[int, ...]
    max_new_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    return_logprob: bool
    # First input position whose logprob is returned; -1 (sglang's default) means the last.
    logprob_start_len: int

    @property
    def logprob_start(self) -> int:
        if self.logprob_start_len < 0:
            return len(self.input_ids) - 1
        return self.logprob_start_len

    @property
    def reusable_limit(self) -> int:
        """How many prompt tokens may come from the cache: at least one token is always
        computed, and positions whose logprobs are asked for are computed fresh."""
        limit = len(self.input_ids) - 1
        return min(limit, self.logprob_start) if self.return_logprob else limit


@dataclass(frozen=True)
class GenerateResult:
    output_ids: tuple[int, ...]
    output_logprobs: tuple[float, ...]
    # Logprobs of input positions from `logprob_start`; the first is None (no context).
    input_logprobs: tuple[float | None, ...]
    cached_tokens: int
    finish_reason: Mapping[str, Any]
    # With the host tier: how many of `cached_tokens` were reloaded from it (sglang's
    # `cached_tokens_details`); None without it.
    cached_from_host: int | None = None


@dataclass(frozen=True)
class Limits:
    vocab_size: int
    context_length: int


def parse_generate(body: Any, limits: Limits) -> tuple[list[GenerateRequest], bool]:
    """The requests in a /generate body, and whether the body was a batch."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if "input_ids" not in body:
        raise RequestError(
            "input_ids is required (this engine has no tokenizer, so `text` is not supported)"
        )
    _flag(body, "stream", False)
    prompts, batched = _prompts(body["input_ids"], limits)
    params = _per_prompt(body.get("sampling_params", {}), len(prompts), "sampling_params")
    logprob = _flag(body, "return_logprob", False)
    starts = _starts(body.get("logprob_start_len", -1), len(prompts))
    requests = [
        _request(prompt, param, logprob, start, index if batched else None, limits)
        for index, (prompt, param, start) in enumerate(zip(prompts, params, starts, strict=True))
    ]
    return requests, batched


def _prompts(value: Any, limits: Limits) -> tuple[list[tuple[int, ...]], bool]:
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        return [_token_list(item, f"input_ids[{i}]", limits) for i, item in enumerate(value)], True
    return [_token_list(value, "input_ids", limits)], False


def _token_list(value: Any, where: str, limits: Limits) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise RequestError(f"{where} must be a non-empty list of token ids")
    for i, token in enumerate(value):
        if not isinstance(token, int) or isinstance(token, bool):
            raise RequestError(f"{where}[{i}] must be an integer token id, got {token!r}")
        if not 0 <= token < limits.vocab_size:
            raise RequestError(
                f"{where}[{i}] = {token} is out of range: token ids are 0..{limits.vocab_size - 1}"
            )
    return tuple(value)


def _per_prompt(value: Any, count: int, name: str) -> list[Mapping[str, Any]]:
    if isinstance(value, dict):
        return [value] * count
    if isinstance(value, list) and len(value) == count and all(isinstance(v, dict) for v in value):
        return value
    raise RequestError(f"{name} must be an object, or a list of {count} objects (one per prompt)")


def _starts(value: Any, count: int) -> list[int]:
    values = value if isinstance(value, list) else [value] * count
    if len(values) != count or not all(_is_int(v) and v >= -1 for v in values):
        raise RequestError("logprob_start_len must be an integer >= -1 (or a list of them)")
    return [int(v) for v in values]


def _request(
    prompt: tuple[int, ...],
    params: Mapping[str, Any],
    return_logprob: bool,
    start: int,
    index: int | None,
    limits: Limits,
) -> GenerateRequest:
    where = "sampling_params" if index is None else f"sampling_params (prompt {index})"
    max_new = params.get("max_new_tokens", 128)
    if not _is_int(max_new) or max_new < 0:
        raise RequestError(f"{where}.max_new_tokens must be an integer >= 0, got {max_new!r}")
    temperature = params.get("temperature", 1.0)
    if not _is_number(temperature) or temperature < 0:
        raise RequestError(f"{where}.temperature must be a number >= 0, got {temperature!r}")
    seed = params.get("sampling_seed")
    if seed is not None and not _is_int(seed):
        raise RequestError(f"{where}.sampling_seed must be an integer, got {seed!r}")
    prompt_name = "input_ids" if index is None else f"input_ids[{index}]"
    if start >= len(prompt):
        raise RequestError(
            f"logprob_start_len ({start}) must be less than the length of {prompt_name} "
            f"({len(prompt)})"
        )
    if len(prompt) + max_new > limits.context_length:
        raise RequestError(
            f"{prompt_name} has {len(prompt)} tokens and asks for {max_new} new ones: "
            f"{len(prompt) + max_new} exceeds the context length {limits.context_length}"
        )
    return GenerateRequest(
        input_ids=prompt,
        max_new_tokens=int(max_new),
        temperature=float(temperature),
        seed=int(seed) if seed is not None else secrets.randbits(63),
        ignore_eos=_flag(params, "ignore_eos", False, where),
        return_logprob=return_logprob,
        logprob_start_len=start,
    )


def _flag(mapping: Mapping[str, Any], key: str, default: bool, where: str = "") -> bool:
    value = mapping.get(key, default)
    if not isinstance(value, bool):
        raise RequestError(f"{where + '.' if where else ''}{key} must be true or false")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def response(request: GenerateRequest, result: GenerateResult, rid: str) -> dict[str, Any]:
    """One prompt's answer, in sglang's shape."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": dict(result.finish_reason),
        "prompt_tokens": len(request.input_ids),
        "completion_tokens": len(result.output_ids),
        "cached_tokens": result.cached_tokens,
    }
    if result.cached_from_host is not None:
        meta["cached_tokens_details"] = {
            "device": result.cached_tokens - result.cached_from_host,
            "host": result.cached_from_host,
        }
    if request.return_logprob:
        meta["output_token_logprobs"] = [
            [logprob, token, None]
            for logprob, token in zip(result.output_logprobs, result.output_ids, strict=True)
        ]
        tokens = request.input_ids[request.logprob_start :]
        meta["input_token_logprobs"] = [
            [logprob, token, None]
            for logprob, token in zip(result.input_logprobs, tokens, strict=True)
        ]
    return {"text": "", "output_ids": list(result.output_ids), "meta_info": meta}


# A streamed answer is cut into at most this many chunks per prompt (plus the final one), so
# its size stays linear in the output however long the output is.
MAX_STREAM_CHUNKS = 128


def stream_chunks(
    requests: Sequence[GenerateRequest], results: Sequence[GenerateResult], batched: bool
) -> Iterator[dict[str, Any]]:
    """`"stream": true` answers, as sglang streams them (incremental_streaming_output off):
    each chunk is the answer so far (output_ids and logprobs cumulative, finish_reason null
    until the last); a batch interleaves its prompts step by step, each chunk with its
    prompt's `index`. The server sends each as `data: {json}` and ends with `data: [DONE]`."""
    finals = [
        response(request, result, secrets.token_hex(16))
        for request, result in zip(requests, results, strict=True)
    ]
    longest = max(len(result.output_ids) for result in results)
    stride = max(1, -(-longest // MAX_STREAM_CHUNKS))
    cuts = [*range(stride, longest, stride), longest] if longest else [0]
    finished = [False] * len(finals)
    for cut in cuts:
        for index, final in enumerate(finals):
            if finished[index]:
                continue
            finished[index] = cut >= len(final["output_ids"])
            chunk = final if finished[index] else _partial(final, cut)
            yield {**chunk, "index": index} if batched else chunk


def _partial(final: dict[str, Any], count: int) -> dict[str, Any]:
    meta = dict(final["meta_info"])
    meta["finish_reason"] = None
    meta["completion_tokens"] = count
    if "output_token_logprobs" in meta:
        meta["output_token_logprobs"] = meta["output_token_logprobs"][:count]
    return {"text": "", "output_ids": final["output_ids"][:count], "meta_info": meta}


def responses(
    requests: Sequence[GenerateRequest], results: Sequence[GenerateResult], batched: bool
) -> Any:
    answers = [
        response(request, result, secrets.token_hex(16))
        for request, result in zip(requests, results, strict=True)
    ]
    return answers if batched else answers[0]

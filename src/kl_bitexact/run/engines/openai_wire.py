"""Pure pieces of the OpenAI completions wire format shared by the vLLM and llama.cpp dialects:
the request body both accept and the parts of an answer both give."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines.base import SamplingParams, TokenIds
from kl_bitexact.run.engines.malformed import decoder

T = TypeVar("T")


def completion_body(model: str, prompt: TokenIds, params: SamplingParams) -> dict[str, Any]:
    """`/v1/completions` fields with the same meaning on every OpenAI-compatible server."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt),
        # Servers sample at least one token even when asked for none (vLLM rejects 0,
        # llama.cpp returns one anyway); a warm-up asks for one and drops it (see `trimmed`).
        "max_tokens": max(1, params.max_new_tokens),
        "temperature": params.temperature,
        "ignore_eos": params.ignore_eos,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    return body


def trimmed(values: Sequence[T], max_new_tokens: int) -> tuple[T, ...]:
    """The answer to `max_new_tokens`: a warm-up (0) keeps nothing of the token it forced."""
    return tuple(values[:max_new_tokens])


def first_choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = require(response, "choices", "the answer")
    if not choices:
        raise EngineError("the server answered a completion with no choices")
    choice: Mapping[str, Any] = choices[0]
    return choice


def require(container: Mapping[str, Any], key: str, where: str) -> Any:
    """`container[key]`, or a EngineError naming what the server left out."""
    if not isinstance(container, Mapping) or container.get(key) is None:
        raise EngineError(f"the server's answer has no {key!r} in {where}")
    return container[key]


@decoder("usage")
def cached_tokens_from_usage(usage: Mapping[str, Any]) -> int | None:
    """OpenAI's `usage.prompt_tokens_details.cached_tokens`; None when not reported."""
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return None if cached is None else int(cached)

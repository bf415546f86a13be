"""Adapters from the checks to an engine's wire protocol, behind `base.Engine`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kl_bitexact.run.engines.base import Engine
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import DialectName, EngineName


def _openai(base_url: str, **options: Any) -> Engine:
    """The OpenAI-compatible adapter and its dialects (vLLM, llama.cpp), loaded for a suite
    that names them: a run against sglang does not pay for importing them."""
    from kl_bitexact.run.engines import openai

    return openai.connect(base_url, **options)


# server.engine -> adapter, one per EngineName (tests/run/test_registries.py holds them
# equal, so a suite that loads always has one); the reference engine speaks sglang's protocol.
ADAPTERS: dict[EngineName, Callable[..., Engine]] = {
    EngineName.SGLANG: SglangEngine,
    EngineName.OPENAI: _openai,
    EngineName.REFERENCE: SglangEngine,
}


def connect(
    engine: EngineName,
    base_url: str,
    *,
    request_timeout: float,
    dialect: DialectName | None = None,
) -> Engine:
    """The adapter for a suite's `server.engine`, talking to `base_url`; `dialect` is
    `server.dialect`, which only `engine: openai` has (the suite loader enforces that)."""
    options = {"dialect": dialect} if dialect else {}
    return ADAPTERS[engine](base_url, request_timeout=request_timeout, **options)

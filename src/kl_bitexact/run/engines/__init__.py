"""Adapters from the checks to an engine's wire protocol, behind `base.Engine`."""

from __future__ import annotations

from collections.abc import Callable

from kl_bitexact.errors import ConfigError
from kl_bitexact.run.engines import openai
from kl_bitexact.run.engines.base import Engine
from kl_bitexact.run.engines.sglang import SglangEngine

# server.engine -> adapter; the reference engine speaks sglang's native protocol.
ADAPTERS: dict[str, Callable[..., Engine]] = {
    "sglang": SglangEngine,
    "reference": SglangEngine,
    "openai": openai.connect,
}


def connect(
    engine: str, base_url: str, *, request_timeout: float, dialect: str | None = None
) -> Engine:
    """The adapter for a suite's `server.engine`, talking to `base_url`; `dialect` is
    `server.dialect`, which only `engine: openai` has (the suite loader enforces that)."""
    require(engine, "server.engine")
    options = {"dialect": dialect} if dialect else {}
    return ADAPTERS[engine](base_url, request_timeout=request_timeout, **options)


def require(engine: str, where: str) -> None:
    """Fail before anything is launched when no adapter speaks `engine`."""
    if engine not in ADAPTERS:
        raise ConfigError(
            f"{where}: engine {engine!r} has no adapter in this version of kl-bitexact",
            hint=f"use one of: {', '.join(ADAPTERS)}",
        )

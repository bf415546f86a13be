"""Adapters from the checks to an engine's wire protocol, behind `base.Engine`."""

from __future__ import annotations

from kl_bitexact.engines import openai
from kl_bitexact.engines.base import Engine
from kl_bitexact.engines.sglang import SglangEngine
from kl_bitexact.errors import ConfigError


def connect(
    engine: str, base_url: str, *, request_timeout: float, dialect: str | None = None
) -> Engine:
    """The adapter for a suite's `server.engine` (and `server.dialect`), talking to `base_url`."""
    if engine in ("sglang", "reference"):  # the reference engine speaks sglang's protocol
        return SglangEngine(base_url, request_timeout=request_timeout)
    if engine == "openai":
        return openai.connect(base_url, dialect, timeout_s=request_timeout)
    raise ConfigError(
        f"engine: {engine} has no adapter in this version of kl-bitexact",
        hint="use engine: sglang, openai or reference",
    )

"""Adapters from the checks to an engine's wire protocol, behind `base.Engine`."""

from __future__ import annotations

from collections.abc import Callable

from kl_bitexact.run.engines import openai
from kl_bitexact.run.engines.base import Engine
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import DialectName, EngineName

# server.engine -> adapter, one per EngineName (tests/run/test_registries.py holds them
# equal, so a suite that loads always has one); the reference engine speaks sglang's protocol.
ADAPTERS: dict[EngineName, Callable[..., Engine]] = {
    EngineName.SGLANG: SglangEngine,
    EngineName.OPENAI: openai.connect,
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

"""The `Engine` for OpenAI-compatible completion servers (vLLM, llama.cpp's llama-server).

Both take token-id prompts (vLLM on `/v1/completions`, llama.cpp on its native `/completion`,
the one that returns every generated id) but differ in how they reveal logprobs, cached
tokens and cache flushing; a `Dialect` holds those differences (engines/vllm.py,
engines/llamacpp.py) and this module holds what is common: one request per prompt (so the
cached-token count belongs to one prompt), answers in prompt order, and telling the dialect
of a server by the endpoints it has. docs/engines.md lists the exact requests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from kl_bitexact.errors import ConfigError, EngineError
from kl_bitexact.run.engines.base import Generation, Replay, Reported, SamplingParams, TokenIds
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.llamacpp import LlamaCppDialect
from kl_bitexact.run.engines.malformed import decoder
from kl_bitexact.run.engines.vllm import VllmDialect
from kl_bitexact.suite.model import DialectName

T = TypeVar("T")
# Requests in flight at once where a dialect allows parallel requests (vLLM batches them).
MAX_PARALLEL_REQUESTS = 64


class Dialect(Protocol):
    name: DialectName
    parallel_requests: bool
    # True when cold generations and replays reuse no cache by themselves (llama.cpp's
    # `cache_prompt: false`); else the engine flushes before them.
    cold_per_request: bool

    def server_info(self, client: JsonClient) -> dict[str, Any]: ...

    def reported(self, client: JsonClient) -> Reported: ...

    def flush(self, client: JsonClient) -> None: ...

    def generate_one(
        self, client: JsonClient, prompt: TokenIds, params: SamplingParams
    ) -> Generation: ...

    def replay_one(self, client: JsonClient, sequence: TokenIds, last: int | None) -> Replay: ...


class OpenAIEngine:
    """An `Engine` over one OpenAI-compatible server."""

    def __init__(self, client: JsonClient, dialect: Dialect) -> None:
        self.client = client
        self.dialect = dialect

    def server_info(self) -> Mapping[str, Any]:
        return self.dialect.server_info(self.client)

    def reported(self) -> Reported:
        return self.dialect.reported(self.client)

    def flush(self) -> None:
        self.dialect.flush(self.client)

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        if params.cold and not self.dialect.cold_per_request:
            self.flush()
        return self._each(
            prompts, lambda prompt: self.dialect.generate_one(self.client, prompt, params)
        )

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        if not self.dialect.cold_per_request:
            self.flush()
        return self._each(
            sequences, lambda sequence: self.dialect.replay_one(self.client, sequence, last)
        )

    def _each(self, items: Sequence[TokenIds], call: Callable[[TokenIds], T]) -> list[T]:
        if not self.dialect.parallel_requests or len(items) < 2:
            return [call(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(len(items), MAX_PARALLEL_REQUESTS)) as pool:
            return list(pool.map(call, items))


# One per DialectName (tests/run/test_registries.py holds them equal): each takes the served model.
DIALECTS: dict[DialectName, Callable[[str], Dialect]] = {
    DialectName.VLLM: VllmDialect,
    DialectName.LLAMACPP: LlamaCppDialect,
}


def connect(
    base_url: str, *, request_timeout: float = 300.0, dialect: DialectName | None = None
) -> OpenAIEngine:
    """An engine for the server at `base_url`; `dialect` (the suite's `server.dialect`)
    is detected from the server's endpoints when not given."""
    client = JsonClient(base_url, timeout_s=request_timeout)
    name = dialect or detect_dialect(client)
    if name not in DIALECTS:  # a caller that did not come through the suite loader
        raise ConfigError(
            f"server.dialect: {name!r} is not a known dialect",
            hint=f"use one of: {', '.join(DIALECTS)}",
        )
    return OpenAIEngine(client, DIALECTS[name](served_model(client)))


def detect_dialect(client: JsonClient) -> DialectName:
    """llama-server answers `GET /props`; vLLM answers `GET /version` and has no /props."""
    if client.status("GET", "/props") == 200:
        return DialectName.LLAMACPP
    if client.status("GET", "/version") == 200:
        return DialectName.VLLM
    raise ConfigError(
        f"cannot tell which OpenAI-compatible server runs at {client.base_url} "
        "(neither /props nor /version answered)",
        hint="set server.dialect: vllm | llamacpp in the suite",
    )


@decoder("/v1/models answer")
def served_model(client: JsonClient) -> str:
    """The id of the first model in `GET /v1/models`, sent back as `model` in every request."""
    models = client.get("/v1/models")
    data = models.get("data") if isinstance(models, Mapping) else None
    if not data or not data[0].get("id"):
        raise EngineError(f"{client.url('/v1/models')} lists no model")
    return str(data[0]["id"])

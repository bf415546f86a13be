"""vLLM's dialect of the OpenAI-compatible completions API.

- generate: `POST /v1/completions` with the prompt as token ids, `logprobs: 1` and
  `return_tokens_as_token_ids` (tokens come back as "token_id:N", so no tokenizer is needed).
- replay: the same endpoint with vLLM's `prompt_logprobs: 0` (the logprob of each prompt token);
  vLLM does not look prompt-logprob requests up in its prefix cache, so the replay is fresh.
- cached tokens: `usage.prompt_tokens_details.cached_tokens`, present only when the server
  runs with `--enable-prompt-tokens-details`; without it they are unknown (None), never 0.
- flush: `POST /reset_prefix_cache`, mounted only when the server runs with VLLM_SERVER_DEV_MODE=1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines.base import Generation, Replay, Reported, SamplingParams, TokenIds
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.malformed import decoder
from kl_bitexact.run.engines.openai_wire import (
    cached_tokens_from_usage,
    completion_body,
    first_choice,
    require,
    trimmed,
)
from kl_bitexact.suite.model import DialectName

TOKEN_ID_PREFIX = "token_id:"


SERVER_INFO = "/server_info?config_format=json"
NO_SERVER_INFO = (
    "vLLM serves its configuration (/server_info) only with VLLM_SERVER_DEV_MODE=1 in the "
    "server's environment"
)


class VllmDialect:
    name = DialectName.VLLM
    # vLLM batches concurrent requests; sending a batch's prompts together is what a user's
    # batch does, so the decode runs with the batch shapes the engine really uses.
    parallel_requests = True
    # vLLM has no per-request switch: cold requests follow a flush.
    cold_per_request = False

    def __init__(self, model: str) -> None:
        self.model = model

    @decoder("/v1/models answer")
    def server_info(self, client: JsonClient) -> dict[str, Any]:
        models = require(client.get("/v1/models"), "data", "/v1/models")
        served = models[0] if models else {}
        # GET /version: {"version": "0.x.y"} (a server without it still runs the checks).
        version = client.get("/version") if client.status("GET", "/version") == 200 else {}
        return {
            "dialect": self.name,
            "model": served.get("id"),
            "max_model_len": served.get("max_model_len"),
            "version": version.get("version") if isinstance(version, dict) else None,
        }

    @decoder("/server_info answer")
    def reported(self, client: JsonClient) -> Reported:
        """vLLM's configuration as it reports it: `GET /server_info?config_format=json`
        answers `{"vllm_config": {...}}` (cache_config.enable_prefix_caching,
        cache_config.block_size, speculative_config, ...), served only in dev mode, as
        /reset_prefix_cache is; a fact names its path inside `vllm_config`."""
        answer = client.get_if_served(SERVER_INFO)
        if answer is None:
            return Reported(f"GET {SERVER_INFO}", {}, why_none=NO_SERVER_INFO)
        config = answer.get("vllm_config") if isinstance(answer, Mapping) else None
        if not isinstance(config, Mapping):
            raise EngineError(f"{client.url(SERVER_INFO)} holds no `vllm_config` object")
        return Reported(f"GET {SERVER_INFO}", config)

    def flush(self, client: JsonClient) -> None:
        status = client.status("POST", "/reset_prefix_cache")
        if status == 404:
            raise EngineError(
                f"{client.url('/reset_prefix_cache')} does not exist, so the prefix cache "
                "cannot be flushed",
                hint="start vLLM with the environment variable VLLM_SERVER_DEV_MODE=1",
            )
        if not 200 <= status < 300:
            raise EngineError(f"POST {client.url('/reset_prefix_cache')} answered {status}")

    def generate_one(
        self, client: JsonClient, prompt: TokenIds, params: SamplingParams
    ) -> Generation:
        body = completion_body(self.model, prompt, params)
        body.update(logprobs=1, top_p=1.0, return_tokens_as_token_ids=True)
        return parse_generation(client.post("/v1/completions", body), params.max_new_tokens)

    def replay_one(self, client: JsonClient, sequence: TokenIds, last: int | None) -> Replay:
        # The one prefill a replay needs scores every prompt position anyway; the full
        # answer is kept whatever `last` asks for.
        del last
        body = {
            "model": self.model,
            "prompt": list(sequence),
            # vLLM generates at least one token; its logprob is not part of the replay.
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
        return parse_replay(client.post("/v1/completions", body), sequence)


@decoder("completion answer")
def parse_generation(response: Mapping[str, Any], max_new_tokens: int) -> Generation:
    choice = first_choice(response)
    logprobs = require(choice, "logprobs", "choices[0]")
    tokens = require(logprobs, "tokens", "choices[0].logprobs")
    values = require(logprobs, "token_logprobs", "choices[0].logprobs")
    usage = response.get("usage") or {}
    return Generation(
        output_ids=trimmed([token_id(token) for token in tokens], max_new_tokens),
        output_logprobs=trimmed([float(value) for value in values], max_new_tokens),
        cached_tokens=cached_tokens_from_usage(usage),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        finish_reason=choice.get("finish_reason"),
    )


@decoder("replay answer")
def parse_replay(response: Mapping[str, Any], sequence: Sequence[int]) -> Replay:
    entries = require(first_choice(response), "prompt_logprobs", "choices[0]")
    if len(entries) != len(sequence):
        raise EngineError(
            f"prompt_logprobs has {len(entries)} entries for a {len(sequence)}-token prompt"
        )
    values: list[float | None] = [None]
    for position in range(1, len(sequence)):
        values.append(_logprob_of(entries[position], sequence[position], position))
    usage = response.get("usage") or {}
    return Replay(input_logprobs=tuple(values), cached_tokens=cached_tokens_from_usage(usage))


def token_id(spelled: str) -> int:
    """vLLM spells a token "token_id:N" when asked for `return_tokens_as_token_ids`."""
    if not spelled.startswith(TOKEN_ID_PREFIX):
        raise EngineError(
            f"token {spelled!r} is not 'token_id:N'; the server ignored "
            "return_tokens_as_token_ids (vLLM 0.6 or newer is needed)"
        )
    return int(spelled[len(TOKEN_ID_PREFIX) :])


def _logprob_of(entry: Mapping[str, Any] | None, token: int, position: int) -> float:
    scored = (entry or {}).get(str(token))
    if scored is None:
        raise EngineError(f"prompt_logprobs[{position}] has no entry for token {token}")
    return float(scored["logprob"])

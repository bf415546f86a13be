"""llama.cpp `llama-server`'s dialect of the OpenAI-compatible completions API.

What llama-server really offers (read from tools/server in the llama.cpp tree, and tried):
- `/v1/completions` takes token-id prompts and passes llama.cpp's own fields through:
  `n_probs`, `cache_prompt`, `top_k`, `min_p`, `logit_bias`. Each generated token comes back in
  `choices[0].logprobs.content[i]` with its `id` and `logprob`; with `post_sampling_probs` off
  that logprob is a softmax of the raw logits, before any sampler touched them.
- cached tokens: `usage.prompt_tokens_details.cached_tokens` and `timings.cache_n`.
- `echo` is refused ("Only no echo is supported") and there are no prompt logprobs, so a replay
  scores every position by its own fresh prefill: prompt `sequence[:i]`, `cache_prompt: false`,
  one token forced to `sequence[i]` by `logit_bias` under greedy sampling; the bias does not
  change the reported logprob (raw logits). One request per scored position, so a replay
  asked for only its `last` positions sends only those requests (earlier entries are None).
- flush: `POST /slots/{id}?action=erase` for every slot of `GET /slots`, which needs
  `--slot-save-path`. The host-RAM prompt cache (`--cache-ram`, on by default) has no HTTP
  flush: run with `--cache-ram 0` for a complete flush.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines.base import Generation, Replay, SamplingParams, TokenIds, tail_start
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.openai_wire import (
    cached_tokens_from_usage,
    completion_body,
    first_choice,
    require,
    trimmed,
)

# Added to the forced token's logit in a replay; far above any real logit gap.
FORCING_BIAS = 1000.0


class LlamaCppDialect:
    name = "llamacpp"
    # One request at a time: llama-server batches concurrent slots into one forward pass,
    # which would make the numbers depend on what else happened to be running.
    parallel_requests = False
    # Cold requests and replays carry `cache_prompt: false`: no flush before them.
    cold_per_request = True

    def __init__(self, model: str) -> None:
        self.model = model

    def server_info(self, client: JsonClient) -> dict[str, Any]:
        props = client.get("/props")
        settings = props.get("default_generation_settings") or {}
        models = client.get("/v1/models").get("data") or [{}]
        return {
            "dialect": self.name,
            "model": props.get("model_path"),
            # Synthetic prompts draw token ids below this.
            "vocab_size": (models[0].get("meta") or {}).get("n_vocab"),
            "total_slots": props.get("total_slots"),
            "n_ctx": settings.get("n_ctx"),
            "build": props.get("build_info"),
        }

    def flush(self, client: JsonClient) -> None:
        for slot in client.get("/slots"):
            path = f"/slots/{slot['id']}?action=erase"
            if client.status("POST", path) == 501:
                raise EngineError(
                    f"{client.url(path)} is not supported, so the prompt cache cannot be flushed",
                    hint="start llama-server with --slot-save-path DIR (and --cache-ram 0)",
                )
            client.post(path)

    def generate_one(
        self, client: JsonClient, prompt: TokenIds, params: SamplingParams
    ) -> Generation:
        body = completion_body(self.model, prompt, params)
        # llama.cpp samples through top-k 40, top-p 0.95 and min-p 0.05 unless told otherwise;
        # switched off so temperature means what it means for sglang and vLLM.
        body.update(n_probs=1, cache_prompt=not params.cold, top_k=0, top_p=1.0, min_p=0.0)
        return parse_generation(client.post("/v1/completions", body), params.max_new_tokens)

    def replay_one(self, client: JsonClient, sequence: TokenIds, last: int | None) -> Replay:
        first = tail_start(len(sequence), last)
        values: list[float | None] = [None] * first
        cached: list[int | None] = []
        for position in range(first, len(sequence)):
            answer = client.post("/v1/completions", self._scoring_body(sequence, position))
            values.append(forced_logprob(answer, sequence[position], position))
            cached.append(cached_tokens(answer))
        return Replay(input_logprobs=tuple(values), cached_tokens=_most(cached))

    def _scoring_body(self, sequence: Sequence[int], position: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt": list(sequence[:position]),
            "max_tokens": 1,
            "temperature": 0.0,
            "n_probs": 1,
            "cache_prompt": False,
            "logit_bias": {str(sequence[position]): FORCING_BIAS},
        }


def parse_generation(response: Mapping[str, Any], max_new_tokens: int) -> Generation:
    choice = first_choice(response)
    content = require(require(choice, "logprobs", "choices[0]"), "content", "choices[0].logprobs")
    usage = response.get("usage") or {}
    return Generation(
        output_ids=trimmed([int(token["id"]) for token in content], max_new_tokens),
        output_logprobs=trimmed([float(token["logprob"]) for token in content], max_new_tokens),
        cached_tokens=cached_tokens(response),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        finish_reason=choice.get("finish_reason"),
    )


def forced_logprob(response: Mapping[str, Any], token: int, position: int) -> float:
    content = require(
        require(first_choice(response), "logprobs", "choices[0]"), "content", "choices[0].logprobs"
    )
    if not content or int(content[0]["id"]) != token:
        got = content[0]["id"] if content else "nothing"
        raise EngineError(
            f"replay of position {position}: llama-server sampled {got}, not the forced "
            f"token {token} (logit_bias ignored?)"
        )
    return float(content[0]["logprob"])


def cached_tokens(response: Mapping[str, Any]) -> int | None:
    """The OpenAI usage field where the server fills it, else llama.cpp's `timings.cache_n`."""
    from_usage = cached_tokens_from_usage(response.get("usage") or {})
    if from_usage is not None:
        return from_usage
    cache_n = (response.get("timings") or {}).get("cache_n")
    return None if cache_n is None else int(cache_n)


def _most(counts: Sequence[int | None]) -> int | None:
    """A replay's cached tokens: the largest any of its requests reported (None if unknown)."""
    known = [count for count in counts if count is not None]
    if len(known) < len(counts):
        return None
    return max(known, default=0)

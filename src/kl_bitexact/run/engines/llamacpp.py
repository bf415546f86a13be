"""llama.cpp `llama-server`'s dialect: its native `/completion` endpoint.

What llama-server really offers (read from tools/server in the llama.cpp tree, and tried;
docs/engines.md has the measurements):
- `/completion` takes a token-id prompt and `n_probs`; each reported token comes back in
  `completion_probabilities` with its `id` and `logprob`, a softmax of the raw logits
  (`post_sampling_probs` off), so no sampler (`logit_bias`, `top_k`, ...) changes it.
  `return_tokens: true` adds every generated id in `tokens`.
- A token whose text leaves the generation in the middle of a UTF-8 character (a byte token
  such as `<0xE4>`, a byte-level BPE piece cut inside a character) gets no entry at all, in
  any API (`/v1/completions` then answers `"logprobs": null`; streaming skips it too). Its
  probability is lost for good; `llamacpp_withheld` tells which ids the entries belong to
  and the position is reported as None ("not reported by the server").
- `cache_prompt: false` makes a request prefill from scratch (the slot's KV and the host-RAM
  prompt cache are not reused) while the slot still keeps what it computed, which a later
  `cache_prompt: true` request can hit. Cold requests and replays use it, so no flush is
  needed for them and the server may run with default flags.
- cached tokens: `timings.cache_n`.
- there are no prompt logprobs, so a replay scores each position by its own fresh prefill:
  prompt `sequence[:i]`, one token forced to `sequence[i]` by `logit_bias` under greedy
  sampling. A forced token that is mid-character on its own is not reported either; every
  token the generation reported is complete on its own, so nothing the checks compare is lost.
- flush (only `multiturn` needs an empty cache): `POST /slots/{id}?action=erase` for every
  slot of `GET /slots`, which needs `--slot-save-path`; the host-RAM prompt cache
  (`--cache-ram`, on by default) has no HTTP flush, so also `--cache-ram 0`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines import llamacpp_withheld
from kl_bitexact.run.engines.base import (
    Generation,
    Replay,
    Reported,
    SamplingParams,
    TokenIds,
    tail_start,
)
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.malformed import decoder
from kl_bitexact.run.engines.openai_wire import require, trimmed
from kl_bitexact.suite.model import DialectName

# Added to the forced token's logit in a replay; far above any real logit gap.
FORCING_BIAS = 1000.0
FLUSH_HINT = (
    "start llama-server with --slot-save-path DIR --cache-ram 0, or leave this check out "
    "(match, prefill_cache_hit and decode_cache_hit need no flush on llama.cpp)"
)


class LlamaCppDialect:
    name = DialectName.LLAMACPP
    # One request at a time: llama-server batches concurrent slots into one forward pass,
    # which would make the numbers depend on what else happened to be running.
    parallel_requests = False
    # Cold requests and replays carry `cache_prompt: false`: no flush before them.
    cold_per_request = True

    def __init__(self, model: str) -> None:
        self.model = model
        self._pieces: dict[int, bytes] = {}  # token id -> its bytes, learnt from /tokenize
        self._specials: dict[int, bool] = {}  # token id -> generation appends it as nothing

    @decoder("/props or /v1/models answer")
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

    @decoder("/props answer")
    def reported(self, client: JsonClient) -> Reported:
        """/props as llama-server sent it: `default_generation_settings` (`n_ctx`, ...),
        `total_slots`, `model_path`, `build_info`. Its command line is not in it: a flag
        such as `--cache-ram` or `--swa-full` cannot be told from here."""
        props = client.get("/props")
        if not isinstance(props, Mapping):
            raise EngineError(
                f"{client.url('/props')} answered {type(props).__name__}, not an object"
            )
        return Reported("GET /props", props)

    @decoder("/slots answer")
    def flush(self, client: JsonClient) -> None:
        for slot in client.get("/slots"):
            path = f"/slots/{slot['id']}?action=erase"
            if client.status("POST", path) == 501:
                raise EngineError(
                    f"{client.url(path)} is not supported (llama-server runs without "
                    "--slot-save-path), so the prompt cache cannot be emptied",
                    hint=FLUSH_HINT,
                )
            client.post(path)

    def generate_one(
        self, client: JsonClient, prompt: TokenIds, params: SamplingParams
    ) -> Generation:
        body = {
            "prompt": list(prompt),
            # llama.cpp answers with one token even when asked for none; a warm-up drops it.
            "n_predict": max(1, params.max_new_tokens),
            "temperature": params.temperature,
            "ignore_eos": params.ignore_eos,
            # llama.cpp samples through top-k 40, top-p 0.95 and min-p 0.05 unless told
            # otherwise; switched off so temperature means what it means for sglang and vLLM.
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
            "n_probs": 1,
            "return_tokens": True,
            "cache_prompt": not params.cold,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        answer = client.post("/completion", body)
        tokens = token_ids(answer)
        # Bytes are needed only to place the entries when some tokens got none.
        complete = len(answer.get("completion_probabilities") or []) == len(tokens)
        kept_back = None if complete else self._kept_back(client, tokens)
        return parse_generation(answer, params.max_new_tokens, kept_back)

    def _kept_back(self, client: JsonClient, tokens: Sequence[int]) -> list[bool]:
        """llama.cpp's rule over the tokens' bytes as the generation appends them."""
        pieces = self._bytes_of(client, tokens)

        def renders_empty(index: int) -> bool:
            return self._special(client, tokens[index])

        return llamacpp_withheld.withheld(pieces, renders_empty)

    def replay_one(self, client: JsonClient, sequence: TokenIds, last: int | None) -> Replay:
        first = tail_start(len(sequence), last)
        values: list[float | None] = [None] * first
        unreported: set[int] = set()
        cached: list[int | None] = []
        for position in range(first, len(sequence)):
            answer = client.post("/completion", self._scoring_body(sequence, position))
            value = forced_logprob(answer, sequence[position], position)
            if value is None:
                unreported.add(position)
            values.append(value)
            cached.append(cached_tokens(answer))
        return Replay(tuple(values), _most(cached), frozenset(unreported))

    def _scoring_body(self, sequence: Sequence[int], position: int) -> dict[str, Any]:
        return {
            "prompt": list(sequence[:position]),
            "n_predict": 1,
            "temperature": 0.0,
            "n_probs": 1,
            "return_tokens": True,
            "cache_prompt": False,
            "logit_bias": {str(sequence[position]): FORCING_BIAS},
        }

    @decoder("/tokenize answer")
    def _bytes_of(self, client: JsonClient, tokens: Sequence[int]) -> list[bytes]:
        unknown = sorted(set(tokens) - self._pieces.keys())
        if unknown:
            answer = client.post("/tokenize", {"content": unknown, "with_pieces": True})
            for item in require(answer, "tokens", "the /tokenize answer"):
                self._pieces[int(item["id"])] = piece_bytes(item.get("piece"))
        missing = [token for token in tokens if token not in self._pieces]
        if missing:
            raise EngineError(f"llama-server's /tokenize gave no piece for tokens {missing[:8]}")
        return [self._pieces[token] for token in tokens]

    @decoder("/tokenize answer")
    def _special(self, client: JsonClient, token: int) -> bool:
        """Whether `token` is a special (UNKNOWN or CONTROL: `<unk>`, `<s>`) that generation
        appends as nothing. The server does not list them; its tokenizer tells: a special's
        spelled-out text is read back as the token only when specials are parsed."""
        if token not in self._specials:
            text = self._pieces[token].decode("utf-8", errors="replace")
            self._specials[token] = self._tokenized(client, text, True) == [
                token
            ] and self._tokenized(client, text, False) != [token]
        return self._specials[token]

    @staticmethod
    def _tokenized(client: JsonClient, text: str, parse_special: bool) -> list[int]:
        body = {"content": text, "add_special": False, "parse_special": parse_special}
        tokens = require(client.post("/tokenize", body), "tokens", "the /tokenize answer")
        return [int(item) for item in tokens]


FINISH_REASONS = {"limit": "length", "eos": "stop", "word": "stop"}


@decoder("/completion answer")
def parse_generation(
    answer: Mapping[str, Any], max_new_tokens: int, kept_back: Sequence[bool] | None
) -> Generation:
    """A `/completion` answer; `kept_back` (which tokens the server withheld,
    `llamacpp_withheld.withheld`) is needed only when some tokens have no entry in
    `completion_probabilities` (None: every token has its entry)."""
    tokens = token_ids(answer)
    entries = answer.get("completion_probabilities") or []
    if kept_back is None:
        kept_back = [False] * len(tokens)
    logprobs = llamacpp_withheld.align(tokens, entries, kept_back)
    return Generation(
        output_ids=trimmed(tokens, max_new_tokens),
        output_logprobs=trimmed(logprobs, max_new_tokens),
        cached_tokens=cached_tokens(answer),
        prompt_tokens=int(answer.get("tokens_evaluated") or 0),
        finish_reason=FINISH_REASONS.get(str(answer.get("stop_type"))),
    )


@decoder("/completion answer")
def token_ids(answer: Mapping[str, Any]) -> list[int]:
    tokens = answer.get("tokens") if isinstance(answer, Mapping) else None
    if not isinstance(tokens, list):
        raise EngineError(
            "llama-server's /completion answer has no 'tokens' list "
            "(a llama.cpp build without return_tokens?)"
        )
    return [int(token) for token in tokens]


def piece_bytes(piece: Any) -> bytes:
    """/tokenize `with_pieces`: a string when the piece is valid UTF-8, else its bytes."""
    if isinstance(piece, str):
        return piece.encode("utf-8")
    if isinstance(piece, list) and all(isinstance(b, int) and 0 <= b < 256 for b in piece):
        return bytes(piece)
    raise EngineError(f"llama-server's /tokenize sent a piece {piece!r}, not text or bytes")


@decoder("/completion scoring answer")
def forced_logprob(answer: Mapping[str, Any], token: int, position: int) -> float | None:
    """The forced token's logprob; None when the server withheld it (mid-character alone)."""
    tokens = token_ids(answer)
    if tokens[:1] != [token]:
        raise EngineError(
            f"replay of position {position}: llama-server sampled {tokens[:1] or 'nothing'}, "
            f"not the forced token {token} (logit_bias ignored?)"
        )
    entries = answer.get("completion_probabilities") or []
    if not entries:
        return None
    return llamacpp_withheld.align(tokens[:1], entries[:1], [False])[0]


@decoder("/completion answer")
def cached_tokens(answer: Mapping[str, Any]) -> int | None:
    """llama.cpp's `timings.cache_n`: prompt tokens taken from the slot's cache."""
    cache_n = (answer.get("timings") or {}).get("cache_n")
    return None if cache_n is None else int(cache_n)


def _most(counts: Sequence[int | None]) -> int | None:
    """A replay's cached tokens: the largest any of its requests reported (None if unknown)."""
    known = [count for count in counts if count is not None]
    if len(known) < len(counts):
        return None
    return max(known, default=0)

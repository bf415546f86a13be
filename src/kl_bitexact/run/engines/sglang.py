"""sglang's native HTTP API (/generate, /flush_cache, /server_info) behind `Engine`.

The shapes are those sglang's own KL helpers use (docs: SGLANG-PROTOCOL.md). Every request
has a timeout, and every failure - refused connection, timeout, HTTP error, an answer
missing a field - becomes an EngineError naming the endpoint, so a check never hangs and
never guesses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines import abandon, apart, transport
from kl_bitexact.run.engines.base import (
    Generation,
    Replay,
    Reported,
    SamplingParams,
    TokenIds,
    tail_start,
)
from kl_bitexact.run.engines.malformed import decoder

CONNECT_TIMEOUT_S = transport.CONNECT_TIMEOUT_S
# sglang schedules a big batch itself; splitting bounds one request's size and duration.
DEFAULT_BATCH_SIZE = 64
# Current sglang's name first, the older one where the current is a 404.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


class SglangEngine:
    """One server, reached at `base_url`."""

    def __init__(
        self,
        base_url: str,
        *,
        request_timeout: float = 1800.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.request_timeout = request_timeout
        self.batch_size = batch_size
        self._connection = transport.Connection(connect_timeout_s=CONNECT_TIMEOUT_S)
        self._rows_alike: bool | None = None  # learnt from the server on the first replay
        self._info: Mapping[str, Any] | None = None  # asked on the first server_info
        self._info_path = SERVER_INFO_PATHS[0]  # the one that answered

    def server_info(self) -> Mapping[str, Any]:
        """The server's configuration, asked once: it is fixed while the server runs, and
        every check of a suite reads it (geometry, radix cache, deterministic mode)."""
        if self._info is None:
            self._info = self._fetch_info()
        return self._info

    def reported(self) -> Reported:
        """/server_info as sglang sent it: its resolved server arguments (the values after
        every resolution, e.g. `disable_radix_cache` forced on by the attention backend),
        `internal_states` per DP rank, `version` (the same request as `server_info`)."""
        info = self.server_info()
        return Reported(f"GET {self._info_path}", info)

    def _fetch_info(self) -> Mapping[str, Any]:
        """sglang 0.5 serves /server_info; older releases only /get_server_info."""
        current, older = SERVER_INFO_PATHS
        try:
            # Bounded as a whole like every request (issue 30: a server dripping this
            # answer held the run for minutes): a timeout here ends the question.
            response = self._request("GET", self.base_url + current, None)
            missing = response.status == 404
        except transport.Timeout:
            raise self._too_slow(self.base_url + current) from None
        except transport.TransportError:
            missing = False  # the request below reports the transport failure
            response = None
        path = older if missing else current
        self._info_path = path
        if response is None or missing or response.status >= 400:
            info = self._call("GET", path)
        else:
            info = _json_of(response, self.base_url + path)
        if not isinstance(info, Mapping):
            raise EngineError(
                f"{self.base_url}{path} answered {type(info).__name__}, not an object"
            )
        return info

    def flush(self) -> None:
        # sglang answers with plain text ("Cache flushed."), not JSON.
        self._call("POST", "/flush_cache", expect_json=False)

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        if params.cold:  # sglang has no per-request switch: a cold request follows a flush
            self.flush()
        answers = self._batched(prompts, _sampling(params), logprob_start_len=-1)
        return [_generation(answer, self.base_url) for answer in answers]

    def generate_apart(
        self, prompts: Sequence[TokenIds], params: SamplingParams
    ) -> list[Generation]:
        """Each prompt its own /generate on its own connection (a session each), all at once."""
        return self.send_apart(prompts, params).generations

    def send_apart(
        self, prompts: Sequence[TokenIds], params: SamplingParams, *, first: int = 0
    ) -> apart.Apart:
        """As `generate_apart`, with the order the answers came back (threads started from
        prompt `first` on)."""

        def alone(prompt: TokenIds) -> Generation:
            solo = SglangEngine(self.base_url, request_timeout=self.request_timeout)
            try:
                return solo.generate([prompt], params)[0]
            finally:
                solo._connection.close()

        return apart.at_once(prompts, alone, first=first)

    def hang_up(
        self, prompt: TokenIds, params: SamplingParams, *, after_s: float, wait_s: float
    ) -> abandon.HungUp:
        """One /generate of `prompt` on its own connection, hung up on (run/engines/abandon)."""
        body = {
            "input_ids": list(prompt),
            "sampling_params": _sampling(params),
            "return_logprob": True,
        }
        return abandon.hang_up(
            self.base_url, "/generate", body, after_s=after_s, wait_s=wait_s,
            connect_s=CONNECT_TIMEOUT_S,
        )  # fmt: skip

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        self.flush()  # a replay is a fresh prefill: nothing of earlier requests may serve it
        return self._replay(sequences, last)

    def _replay(self, sequences: Sequence[TokenIds], last: int | None) -> list[Replay]:
        if not self._scores_rows_alike():
            last = None
        # sglang scores positions from `logprob_start_len` on and answers null for the first
        # of them, so the tail starts one position before the first logprob needed.
        starts = [tail_start(len(sequence), last) - 1 for sequence in sequences]
        sampling = {"temperature": 1, "max_new_tokens": 0, "ignore_eos": True}
        answers = self._batched(sequences, sampling, logprob_start_len=starts)
        replays = [
            _replay(answer, start, self.base_url)
            for answer, start in zip(answers, starts, strict=True)
        ]
        # sglang may take the prefix before `logprob_start_len` from its cache (filled by an
        # earlier sequence of this very replay); such a replay is no fresh prefill, so it is
        # scored again from position 0, which sglang never serves from the cache.
        stale = [i for i, start in enumerate(starts) if start and replays[i].cached_tokens != 0]
        if stale:
            fresh = self._replay([sequences[i] for i in stale], None)
            for i, replay in zip(stale, fresh, strict=True):
                replays[i] = replay
        return replays

    def _scores_rows_alike(self) -> bool:
        """Whether a position's logprob keeps its bits however many positions are scored.

        A tail scores fewer rows through the final matmul than a full replay; only with
        batch-invariant kernels (`--enable-deterministic-inference`) is that guaranteed not
        to move the last bits, so elsewhere every replay scores every position, as sglang's
        own KL helpers do."""
        if self._rows_alike is None:
            self._rows_alike = self.server_info().get("enable_deterministic_inference") is True
        return self._rows_alike

    # --- transport ----------------------------------------------------------------------

    def _batched(
        self,
        prompts: Sequence[TokenIds],
        sampling: Mapping[str, Any],
        *,
        logprob_start_len: int | Sequence[int],
    ) -> list[Mapping[str, Any]]:
        """`logprob_start_len`: one value for every prompt, or one per prompt."""
        answers: list[Mapping[str, Any]] = []
        for offset in range(0, len(prompts), self.batch_size):
            batch = prompts[offset : offset + self.batch_size]
            starts = logprob_start_len
            if not isinstance(starts, int):
                starts = list(starts[offset : offset + len(batch)])
                # One value for all, as sglang's own helpers send it, where one will do.
                starts = starts[0] if len(set(starts)) == 1 else starts
            body = {
                "input_ids": [list(prompt) for prompt in batch],
                "sampling_params": dict(sampling),
                "return_logprob": True,
                "return_text_in_logprobs": False,
                "logprob_start_len": starts,
            }
            answer = self._call("POST", "/generate", body)
            # sglang answers a batch with a list; be lenient with a one-prompt object.
            items = answer if isinstance(answer, list) else [answer]
            if len(items) != len(batch) or not all(isinstance(i, Mapping) for i in items):
                raise EngineError(
                    f"{self.base_url}/generate: {len(items)} answers for {len(batch)} prompts"
                )
            answers.extend(items)
        return answers

    def _request(self, method: str, url: str, body: Any) -> transport.Answer:
        """One request, headers and body done within request_timeout, or Timeout."""
        return self._connection.request(method, url, body, total_s=self.request_timeout)

    def _too_slow(self, url: str) -> EngineError:
        return EngineError(
            f"{url} did not answer within {self.request_timeout:g} s",
            hint="raise server.request_timeout in the suite, or look at the server log",
        )

    def _call(self, method: str, path: str, body: Any = None, *, expect_json: bool = True) -> Any:
        url = self.base_url + path
        try:
            response = self._request(method, url, body)
        except transport.Timeout:
            raise self._too_slow(url) from None
        except transport.TransportError as error:
            raise EngineError(f"{url} could not be reached: {_reason(error)}") from None
        if response.status >= 400:
            raise EngineError(f"{url} answered HTTP {response.status}: {response.text[:500]}")
        if not expect_json:
            return None
        return _json_of(response, url)


def _sampling(params: SamplingParams) -> dict[str, Any]:
    sampling: dict[str, Any] = {
        "temperature": params.temperature,
        "max_new_tokens": params.max_new_tokens,
        "ignore_eos": params.ignore_eos,
    }
    if params.seed is not None:
        sampling["sampling_seed"] = params.seed
    return sampling


def _json_of(response: transport.Answer, url: str) -> Any:
    try:
        return response.json()
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise EngineError(
            f"{url} answered something that is not JSON: {response.text[:200]!r}"
        ) from None


def _reason(error: transport.TransportError) -> str:
    text = str(error)
    return text if len(text) < 300 else text[:300] + "..."


# --- answer decoding ----------------------------------------------------------------------


@decoder("/generate answer")
def _generation(answer: Mapping[str, Any], where: str) -> Generation:
    meta = _field(answer, "meta_info", Mapping, where)
    output_ids = tuple(int(token) for token in _field(answer, "output_ids", list, where))
    logprobs = _logprobs(_field(meta, "output_token_logprobs", list, where), where)
    if len(logprobs) != len(output_ids) or any(lp is None for lp in logprobs):
        raise EngineError(
            f"{where}/generate: {len(output_ids)} output ids but "
            f"{len(logprobs)} output logprobs (some missing)"
        )
    return Generation(
        output_ids=output_ids,
        output_logprobs=tuple(float(lp) for lp in logprobs if lp is not None),
        cached_tokens=_optional_int(meta.get("cached_tokens")),
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        finish_reason=_finish_reason(meta.get("finish_reason")),
        cached_from_host=_from_host(meta.get("cached_tokens_details")),
    )


def _from_host(details: Any) -> int | None:
    """sglang's `cached_tokens_details.host` (a hierarchical cache's reloaded tokens)."""
    return _optional_int(details.get("host")) if isinstance(details, Mapping) else None


@decoder("/generate replay answer")
def _replay(answer: Mapping[str, Any], start: int, where: str) -> Replay:
    """Entries from position `start` on; the positions before it are None."""
    meta = _field(answer, "meta_info", Mapping, where)
    logprobs = _logprobs(_field(meta, "input_token_logprobs", list, where), where)
    return Replay(
        input_logprobs=(None,) * start + logprobs,
        cached_tokens=_optional_int(meta.get("cached_tokens")),
    )


def _logprobs(entries: list[Any], where: str) -> tuple[float | None, ...]:
    """`[[logprob, token_id, text], ...]` -> logprobs (None where sglang sends null)."""
    if all(type(entry) is list and entry for entry in entries):  # as JSON decodes them
        return tuple([None if entry[0] is None else float(entry[0]) for entry in entries])
    values: list[float | None] = []
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or not entry:
            raise EngineError(
                f"{where}/generate: a logprob entry is {entry!r}, not [logprob, id, text]"
            )
        values.append(None if entry[0] is None else float(entry[0]))
    return tuple(values)


def _field(mapping: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = mapping.get(key)
    if not isinstance(value, kind):
        raise EngineError(
            f"{where}/generate: answer has no {key!r} {kind.__name__} "
            "(is this an sglang server, and was return_logprob honoured?)"
        )
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None or isinstance(value, bool) else int(value)


def _finish_reason(value: Any) -> str | None:
    if isinstance(value, Mapping):  # sglang: {"type": "length", "length": N}
        kind = value.get("type")
        return str(kind) if kind is not None else None
    return None if value is None else str(value)

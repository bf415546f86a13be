"""The reference engine: model, radix cache, decoding loop, behind one lock.

Requests are served one batch at a time (the lock makes concurrent HTTP requests safe).
A batch is matched against the cache, its uncached prompt tails are prefilled together,
it is decoded step by step (or speculatively), and each sequence is cached at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from kl_bitexact import __version__
from kl_bitexact.reference import speculative
from kl_bitexact.reference.abandon import prefill_watching
from kl_bitexact.reference.checkpoints import CheckpointPolicy
from kl_bitexact.reference.config import EngineConfig
from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.model import Model, ModelSpec, init_weights
from kl_bitexact.reference.numerics import Array, numerics_for
from kl_bitexact.reference.prefill_graph import PrefillGraphRunner
from kl_bitexact.reference.protocol import GenerateRequest, GenerateResult, Limits
from kl_bitexact.reference.radix_cache import NO_MATCH, CacheGeometry, PrefixMatch, RadixCache
from kl_bitexact.reference.run import Run
from kl_bitexact.reference.sequence import SequenceState
from kl_bitexact.reference.vocabulary import Vocabulary

MODEL_NAME = "kl-bitexact-reference"


class ReferenceEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.spec = ModelSpec(
            vocab_size=config.vocab_size, sliding_window=config.sliding_window_size
        )
        self.vocabulary = Vocabulary(config.vocab_size, config.seed)
        numerics = numerics_for(config.enable_deterministic_inference)
        weights = init_weights(self.spec, config.seed)
        self.model = Model(self.spec, weights, numerics, self.vocabulary.class_weight)
        self.cache = RadixCache(
            CacheGeometry(
                page_size=config.page_size,
                sliding_window=config.sliding_window_size,
                max_total_tokens=config.max_total_tokens,
                hierarchical=config.enable_hierarchical_cache,
                write_through=config.hicache_write_policy == "write_through",
                host_ratio=config.hicache_ratio,
                faults=config.faults,
            )
        )
        self.prefill_policy = CheckpointPolicy.chunks(config.chunked_prefill_size, config.faults)
        self.track_policy = CheckpointPolicy.track(config.mamba_track_interval, config.faults)
        # Only a configuration that keeps the prefill graph builds its runner.
        self.prefill_graph = PrefillGraphRunner.built_for(config)
        self.limits = Limits(self.spec.vocab_size, config.context_length)
        self._lock = threading.Lock()
        # Fault.ORDER_DEPENDENT_DECODE: one draw per decode step, over the server's lifetime.
        self._jitter = np.random.default_rng(config.seed)

    @property
    def _exact(self) -> bool:
        return self.config.enable_deterministic_inference

    def server_info(self) -> dict[str, Any]:
        return {
            "model_path": MODEL_NAME,
            "version": __version__,
            **self.config.server_info(),
            # What a real engine's device and kernels are: here numpy, exact or plain float32.
            "backend": "numpy, " + ("exact batch-invariant" if self._exact else "float32"),
            "vocab_size": self.spec.vocab_size,
            "eos_token_id": self.spec.eos_token_id,
            "model_layers": list(self.spec.layers),
        }

    def flush(self) -> None:
        with self._lock:
            self.cache.flush()

    def generate(
        self, requests: Sequence[GenerateRequest], gone: Callable[[], bool] | None = None
    ) -> list[GenerateResult]:
        """Serve one batch. `gone` (one request only): asked between prefill chunks whether
        the client has left; if so the request is dropped (abandon.Abandoned is raised)."""
        with self._lock:
            runs = [self._start(request) for request in requests]
            if self.config.has(Fault.ONE_PAGE_PREFIX_MIXED_BATCH):
                _corrupt_one_page_hits_beside_cold(runs, self.config.page_size)
            if gone is not None and len(runs) == 1:
                prefill_watching(self, runs[0], self._prefill_track_policy(), gone)
            self._prefill(runs)
            self._first_tokens(runs)
            if self.config.draft_tokens:
                speculative.decode(self, runs)
            else:
                self._decode(runs)
                if self.config.overlap_schedule:
                    self._feed_last(runs)
            for run in runs:
                self._cache(run)
            results = [run.result() for run in runs]
            if self.config.has(Fault.CACHED_TOKENS_OFF_BY_ONE):
                chunk = self.config.chunked_prefill_size
                results = [_one_short_on_a_chunk_boundary(r, chunk) for r in results]
            return results

    # ---- stages -------------------------------------------------------------------------

    def _start(self, request: GenerateRequest) -> Run:
        match = NO_MATCH
        if not self.config.disable_radix_cache:
            match = self.cache.match(request.input_ids, request.reusable_limit)
        capacity = len(request.input_ids) + request.max_new_tokens + self.config.draft_tokens + 2
        state = self.model.new_state(capacity)
        _restore(state, match, self.config.page_size)
        host = match.from_host if self.config.enable_hierarchical_cache else None
        return Run(request, state, cached_tokens=match.length, cached_from_host=host)

    def _prefill(self, runs: list[Run]) -> None:
        if self.prefill_graph is not None:
            self.prefill_graph.run(self, runs)
        else:
            self.prefill_with(runs, self.track_policy)

    def _prefill_track_policy(self) -> CheckpointPolicy | None:
        """The track checkpoints a prefill keeps (the graph runner decides its own)."""
        if self.prefill_graph is not None:
            return self.prefill_graph.policy()
        return self.track_policy

    def prefill_with(self, runs: list[Run], track_policy: CheckpointPolicy | None) -> None:
        """Prefill the uncached tails; `track_policy` None keeps no track checkpoint."""
        starts = [run.state.length for run in runs]
        ends = [len(run.request.input_ids) for run in runs]
        befores = [run.state.recurrent.copy() for run in runs]
        tracked = [
            track_policy.capture(s, e) if track_policy else frozenset()
            for s, e in zip(starts, ends, strict=True)
        ]
        capture = [
            self.prefill_policy.capture(s, e) | more
            for s, e, more in zip(starts, ends, tracked, strict=True)
        ]
        tails = [run.request.input_ids[start:] for run, start in zip(runs, starts, strict=True)]
        hidden, captured = self.model.extend([run.state for run in runs], tails, capture)
        for i, run in enumerate(runs):
            span = (starts[i], ends[i], captured[i], befores[i])
            run.checkpoints.update(self.prefill_policy.take(*span))
            if track_policy is not None:
                self.track(run, track_policy.take(*span))
            self._prompt_logprobs(run, hidden[i], starts[i])

    @staticmethod
    def track(run: Run, tracked: dict[int, Array]) -> None:
        """Keep only the latest tracked state, as sglang does for a request."""
        if tracked:
            run.last_track = max(tracked.items(), key=lambda item: item[0])

    def _prompt_logprobs(self, run: Run, rows: Array, start: int) -> None:
        request = run.request
        if not request.return_logprob:
            run.next_logprobs = self.model.logprobs(rows[-1:])[0]
            return
        first = request.logprob_start
        table = self.model.logprobs(rows[first - start :])
        following = request.input_ids[first + 1 :]
        scored = [self.vocabulary.logprob(table[i], token) for i, token in enumerate(following)]
        run.input_logprobs = (None, *scored)
        run.next_logprobs = table[-1]

    def _first_tokens(self, runs: list[Run]) -> None:
        for run in runs:
            if not run.done:
                assert run.next_logprobs is not None, "prefill scores the next token"
                self.sample_into(run, run.next_logprobs)

    def sample_into(self, run: Run, logprobs: Array) -> int:
        request = run.request
        token = self.vocabulary.sample(logprobs, request.temperature, request.seed, run.position)
        run.commit(token, self.vocabulary.logprob(logprobs, token), self.spec.eos_token_id)
        return token

    def _decode(self, runs: list[Run]) -> None:
        active = [run for run in runs if not run.done]
        while active:
            states = [run.state for run in active]
            starts = [state.length for state in states]
            befores = [state.recurrent.copy() for state in states]
            capture = [self.track_policy.capture(s, s + 1) for s in starts]
            chunks = [[run.outputs[-1]] for run in active]
            hidden, captured = self.model.extend(states, chunks, capture)
            table = self._jittered(self.model.logprobs(np.concatenate(hidden)))
            for i, run in enumerate(active):
                tracked = self.track_policy.take(starts[i], starts[i] + 1, captured[i], befores[i])
                self.track(run, tracked)
                self.sample_into(run, table[i])
            active = [run for run in active if not run.done]

    def _feed_last(self, runs: list[Run]) -> None:
        """The last output token of each run fed too (its keys and state computed, nothing
        sampled), as the overlapping scheduler has done by the time a request finishes."""
        fed = [run for run in runs if run.outputs and run.state.length < len(run.tokens())]
        if not fed:
            return
        starts = [run.state.length for run in fed]
        befores = [run.state.recurrent.copy() for run in fed]
        capture = [self.track_policy.capture(s, s + 1) for s in starts]
        chunks = [[run.outputs[-1]] for run in fed]
        _, captured = self.model.extend([run.state for run in fed], chunks, capture)
        for i, run in enumerate(fed):
            self.track(
                run, self.track_policy.take(starts[i], starts[i] + 1, captured[i], befores[i])
            )

    def _jittered(self, table: Array) -> Array:
        """Under ORDER_DEPENDENT_DECODE, some rows one ulp up (which ones depends on
        everything decoded since launch); unchanged otherwise."""
        if not self.config.has(Fault.ORDER_DEPENDENT_DECODE):
            return table
        bumped = self._jitter.random(len(table)) < 0.5
        return np.where(bumped[:, None], np.nextafter(table, np.inf), table)

    def _cache(self, run: Run) -> None:
        if self.config.disable_radix_cache:
            return
        checkpoints = run.cache_checkpoints()
        if self.config.has(Fault.SPEC_OVERSHOOT_CACHED):
            checkpoints = speculative.cache_overshoot_as_returned(
                run, checkpoints, self.config.page_size
            )
        self.cache.insert(run.tokens(), run.state, checkpoints)


def _corrupt_one_page_hits_beside_cold(runs: list[Run], page_size: int) -> None:
    """Fault.ONE_PAGE_PREFIX_MIXED_BATCH: in a batch holding a request that reuses nothing,
    each request whose restored prefix is exactly one page loses its last cached row (the
    request's own copy: the cache itself stays sound, so an uncached replay is unaffected)."""
    if not any(run.cached_tokens == 0 for run in runs):
        return
    for run in runs:
        if run.cached_tokens == page_size:
            run.state.full_kv[:, :, page_size - 1] = 0


def _one_short_on_a_chunk_boundary(result: GenerateResult, chunk: int) -> GenerateResult:
    """Fault.CACHED_TOKENS_OFF_BY_ONE: a reused prefix ending on a chunk boundary is reported
    one token short (only the count: the tokens served from the cache are the same)."""
    if result.cached_tokens == 0 or result.cached_tokens % chunk:
        return result
    shown = result.cached_tokens - 1
    host = result.cached_from_host
    return replace(
        result, cached_tokens=shown, cached_from_host=None if host is None else min(host, shown)
    )


def _restore(state: SequenceState, match: PrefixMatch, page_size: int) -> None:
    """Load a cached prefix into a fresh sequence state."""
    for index, page in enumerate(match.pages):
        span = slice(index * page_size, (index + 1) * page_size)
        state.full_kv[:, :, span] = page.full_kv
        if page.window_kv is not None and index * page_size >= match.window_start:
            state.window_kv[:, :, span] = page.window_kv
    state.length = match.length
    state.window_start = match.window_start
    if match.checkpoint is not None:
        state.recurrent = match.checkpoint.astype(state.recurrent.dtype)

"""The engine's effective settings, spelled as sglang spells its server arguments."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.vocabulary import HEAD_CLASSES, MAX_VOCAB_SIZE

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "DSPARK", "NGRAM", "STANDALONE")
HICACHE_WRITE_POLICIES = ("write_through", "write_back")
# Names only: every backend runs the same numpy arithmetic. What differs is how the
# server resolves its arguments, as sglang 0.5.23 does: deterministic inference keeps the
# radix cache only on backends with a deterministic radix path (its
# RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND: ascend, fa3, fa4, triton).
ATTENTION_BACKENDS = ("triton", "fa3", "flashinfer")
RADIX_DETERMINISTIC_BACKENDS = ("triton", "fa3")
PREFILL_GRAPH_BACKENDS = ("disabled", "breakable", "full")
# sglang 0.5.23 builds no prefill CUDA graph runner for an EAGLE target (its graph setup:
# "Disable prefill CUDA graph for EAGLE target ..."); DSPARK keeps it (PR 35293).
NO_PREFILL_GRAPH = ("EAGLE", "EAGLE3")


@dataclass(frozen=True)
class EngineConfig:
    page_size: int = 16
    mamba_track_interval: int = 16
    chunked_prefill_size: int = 64
    sliding_window_size: int = 32
    context_length: int = 4096
    max_total_tokens: int = 65536
    disable_radix_cache: bool = False
    enable_hierarchical_cache: bool = False
    hicache_write_policy: str = "write_through"
    hicache_ratio: float = 2.0
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    enable_deterministic_inference: bool = False
    # sglang's overlapping scheduler (its default) has fed a request's last output token
    # by the time the request finishes: the whole sequence is cached, not all but one.
    overlap_schedule: bool = False
    attention_backend: str = "triton"
    # What was asked (`--cuda-graph-backend-prefill`); `prefill_graph_backend` what resolved.
    cuda_graph_backend_prefill: str = "disabled"
    seed: int = 0
    # Token ids served (vocabulary.py); 320 is the head's own width.
    vocab_size: int = HEAD_CLASSES
    faults: frozenset[Fault] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        problems = list(_problems(self))
        if problems:
            raise ValueError("; ".join(problems))

    def has(self, fault: Fault) -> bool:
        return fault in self.faults

    def inactive_faults(self) -> tuple[str, ...]:
        """Each `--fault` this configuration keeps from acting, naming the flag to change:
        a green run under an inactive fault reads as "the check cannot catch it" (issue 20)."""
        return tuple(
            f"--fault {fault.value} cannot act on this server ({why[0]}): a passing test "
            f"says nothing about whether it catches this bug; {why[1]}"
            for fault in sorted(self.faults, key=lambda f: f.value)
            if (why := self._keeps_inactive(fault))
        )

    def _keeps_inactive(self, fault: Fault) -> tuple[str, str] | None:
        """(why, what to do) when this configuration keeps `fault` from acting."""
        if fault in _NEEDS_A_CACHE and self.disable_radix_cache:
            return "--disable-radix-cache: nothing is reused", "drop --disable-radix-cache"
        if fault in _NEEDS_A_HOST_TIER and not self.enable_hierarchical_cache:
            return "no host tier without --enable-hierarchical-cache", (
                "add --enable-hierarchical-cache"
            )
        if fault is Fault.SPEC_OVERSHOOT_CACHED and self.speculative_algorithm is None:
            return "no speculative step without --speculative-algorithm", (
                "add --speculative-algorithm EAGLE"
            )
        return None

    @property
    def prefill_graph_backend(self) -> str:
        """The prefill graph as resolved: off for an algorithm that never builds its runner."""
        if self.speculative_algorithm in NO_PREFILL_GRAPH:
            return "disabled"
        return self.cuda_graph_backend_prefill

    @property
    def draft_tokens(self) -> int:
        """Tokens proposed per speculative step; 0 when speculative decoding is off."""
        if self.speculative_algorithm is None:
            return 0
        return self.speculative_num_draft_tokens or 4

    def server_info(self) -> dict[str, Any]:
        return {
            "page_size": self.page_size,
            "mamba_track_interval": self.mamba_track_interval,
            "chunked_prefill_size": self.chunked_prefill_size,
            "sliding_window_size": self.sliding_window_size,
            "context_length": self.context_length,
            "max_total_tokens": self.max_total_tokens,
            "disable_radix_cache": self.disable_radix_cache,
            "enable_hierarchical_cache": self.enable_hierarchical_cache,
            "hicache_write_policy": self.hicache_write_policy,
            "hicache_ratio": self.hicache_ratio,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_num_draft_tokens": self.draft_tokens or None,
            "enable_deterministic_inference": self.enable_deterministic_inference,
            "disable_overlap_schedule": not self.overlap_schedule,
            "attention_backend": self.attention_backend,
            "cuda_graph_backend_prefill": self.cuda_graph_backend_prefill,
            # Nested as sglang 0.5.23 reports its resolved graph configuration.
            "cuda_graph_config": {
                "prefill": {"backend": self.prefill_graph_backend},
                "decode": {"backend": "disabled"},
            },
            "random_seed": self.seed,
            "faults": sorted(fault.value for fault in self.faults),
            # Ours, not sglang's: read by `run` into each test's warnings.
            "inactive_faults": list(self.inactive_faults()),
        }


def resolve(config: EngineConfig) -> tuple[EngineConfig, tuple[str, ...]]:
    """The configuration the server runs, as sglang resolves its arguments after parsing
    them, and a line for each decision (the server logs them; /server_info reports the
    result, so a suite's `expect` sees what the server will really do)."""
    notes: list[str] = []
    if (
        config.enable_deterministic_inference
        and config.attention_backend not in RADIX_DETERMINISTIC_BACKENDS
        and not config.disable_radix_cache
    ):
        notes.append(
            f"radix cache is not compatible with the {config.attention_backend} attention "
            "backend for deterministic inference: disable_radix_cache resolved to true "
            "(as sglang resolves it)"
        )
        config = replace(config, disable_radix_cache=True)
    if config.cuda_graph_backend_prefill != config.prefill_graph_backend:
        notes.append(
            f"disable prefill graph for {config.speculative_algorithm} target: its prefill "
            "graph runner is never built (as sglang 0.5.23 skips it)"
        )
    return config, tuple(notes)


# Faults that corrupt what a hit reuses: with no radix cache there is no hit.
_NEEDS_A_CACHE = frozenset(
    {
        Fault.HICACHE_LOSSY,
        Fault.CHECKPOINT_OFF_BY_ONE,
        Fault.SPEC_OVERSHOOT_CACHED,
        Fault.SWA_EARLY_RELEASE,
        Fault.BRANCH_CHECKPOINT_REUSE,
        Fault.ONE_PAGE_PREFIX_MIXED_BATCH,
        Fault.RESTORE_AFTER_EVICTION,
        Fault.REUSE_AFTER_ABANDONED_PREFILL,
        Fault.CACHED_TOKENS_OFF_BY_ONE,
    }
)
# Faults in the round trip through the host tier: without one, nothing is restored.
_NEEDS_A_HOST_TIER = frozenset({Fault.HICACHE_LOSSY, Fault.RESTORE_AFTER_EVICTION})


def _problems(config: EngineConfig) -> list[str]:
    positive = {
        "--page-size": config.page_size,
        "--mamba-track-interval": config.mamba_track_interval,
        "--chunked-prefill-size": config.chunked_prefill_size,
        "--sliding-window": config.sliding_window_size,
        "--context-length": config.context_length,
        "--max-total-tokens": config.max_total_tokens,
    }
    problems = [f"{flag} must be at least 1 (got {v})" for flag, v in positive.items() if v < 1]
    if not HEAD_CLASSES <= config.vocab_size <= MAX_VOCAB_SIZE:
        problems.append(
            f"--vocab-size must be between {HEAD_CLASSES} and {MAX_VOCAB_SIZE} "
            f"(got {config.vocab_size})"
        )
    if config.hicache_write_policy not in HICACHE_WRITE_POLICIES:
        choices = ", ".join(HICACHE_WRITE_POLICIES)
        problems.append(f"--hicache-write-policy must be one of {choices}")
    if config.attention_backend not in ATTENTION_BACKENDS:
        problems.append(f"--attention-backend must be one of {', '.join(ATTENTION_BACKENDS)}")
    if config.cuda_graph_backend_prefill not in PREFILL_GRAPH_BACKENDS:
        choices = ", ".join(PREFILL_GRAPH_BACKENDS)
        problems.append(f"--cuda-graph-backend-prefill must be one of {choices}")
    if config.hicache_ratio < 1:
        problems.append("--hicache-ratio must be at least 1")
    if config.speculative_algorithm not in (None, *SPECULATIVE_ALGORITHMS):
        problems.append(
            f"--speculative-algorithm must be one of {', '.join(SPECULATIVE_ALGORITHMS)}"
        )
    drafts = config.speculative_num_draft_tokens
    if drafts is not None and drafts < 2:
        problems.append("--speculative-num-draft-tokens must be at least 2")
    return problems

"""What a failing `match` says about the engine, and the engine's own switch for it (pure).

`match` involves no cache: a decode against a fresh prefill of the same tokens. When it
fails, the engine is not batch-invariant (a decode step, a one-token batch, rounds
differently from the many-token prefill that replays it), and every cache check inherits
that drift. The engines have switches that make them batch-invariant; this table names
them (docs/engines.md, "Batch invariance", holds the same table: tests/run hold them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Status, TestResult

# engine kind -> (its name, what makes it batch-invariant)
SWITCHES: dict[str, tuple[str, str]] = {
    "llamacpp": (
        "llama.cpp",
        "start llama-server with -np 1 -ub 1 (one slot, one-token micro-batches: a prefill "
        "then runs a decode step's kernels; measured bit-exact on an H200)",
    ),
    "vllm": ("vLLM", "start vLLM with VLLM_BATCH_INVARIANT=1 (its batch-invariant mode)"),
    "sglang": ("sglang", "start sglang with --enable-deterministic-inference"),
}
OTHERWISE = "or judge the cache checks by the drift itself: gate: noise-floor"


def engine_kind(info: Mapping[str, Any]) -> str | None:
    """Which engine answered `server_info`: an OpenAI dialect names itself; sglang's
    /server_info (and the reference engine's, which speaks it) has its server args."""
    dialect = info.get("dialect")
    if isinstance(dialect, str) and dialect in SWITCHES:
        return dialect
    return "sglang" if "enable_deterministic_inference" in info else None


def not_invariant(result: TestResult, info: Mapping[str, Any]) -> str | None:
    """The warning a failed `match` carries: the engine is not batch-invariant, and the
    switch that makes it so. None when `match` did not fail on differing logprobs."""
    exact = result.exact
    if result.status is not Status.FAILED or exact is None or not exact.mismatched:
        return None
    kind = engine_kind(info)
    name, switch = SWITCHES[kind] if kind else ("this engine", "find its batch-invariant mode")
    return (
        f"not batch-invariant: with no cache involved, {exact.mismatched}/{exact.tokens} "
        f"decoded logprobs differ from their replay (avg KL {fmt_kl(result.kl_div)}), so every "
        f"cache check inherits that drift; {name}: {switch}, {OTHERWISE}"
    )

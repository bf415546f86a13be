"""`abandoned_prefix_reuse`: hang up on each prompt mid-prefill, then ask for it again.

sglang PR 38355: a request aborted during chunked prefill left its partly written KV pages
in the radix cache as if complete, and every later request with that prefix read them. The
four other checks never hang up, so none can see it.

Phases: flush; for each prompt, a request on its own connection that the client hangs up on
as soon as it is sent (the server, prefilling chunk by chunk, should drop it and keep only
what it computed), each waited for until the server is done with it; then the same prompts,
each with `separator_ids` appended (so the whole abandoned prompt is a reusable prefix),
generated in one batch (they may reuse what the abandoned requests left); replay (cold) and
compare every generated token, as `prefill_cache_hit` does. Cannot tell (not_run) when the
adapter cannot hang up, when the server was not done with a hung-up request within the wait
(what it left is unknown), or when it answered every one anyway (no abort was exercised:
prompts no longer than a prefill chunk are never dropped).
"""

from __future__ import annotations

from kl_bitexact.results.model import CacheHits, TestResult
from kl_bitexact.run.checks import prompts, scoring
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.abandon import HangsUp, HungUp
from kl_bitexact.suite.model import TestSpec

# How long the server may take to finish with a request hung up on (it prefills at most the
# prompt); past it, what it left in the cache is unknown.
HANG_UP_WAIT_S = 120.0
NO_HANG_UP = (
    "this engine adapter cannot hang up on a request (sglang's native API only), so no "
    "abandoned prefill was sent"
)


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    engine = phases.engine
    context = scoring.begin(engine, spec, test_id)
    if not context.geometry.radix_cache:
        return scoring.not_run(context, scoring.RADIX_DISABLED)
    if not isinstance(engine, HangsUp):
        return scoring.not_run(context, NO_HANG_UP)
    batch = prompts.single_turn(spec, context.info)
    engine.flush()
    params = scoring.sampling(spec)
    ended = [engine.hang_up(p, params, after_s=0.0, wait_s=HANG_UP_WAIT_S) for p in batch]
    unknown = _cannot_tell(ended, context.info.get("chunked_prefill_size"))
    if unknown:
        return scoring.not_run(context, unknown)
    # One more token, so the whole abandoned prompt is a prefix the next request may reuse.
    again = [(*prompt, *spec.separator_ids) for prompt in batch]
    generations = engine.generate(again, params)
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    kept = [i for i, g in enumerate(generations) if g.cached_tokens]
    samples = scoring.replay_and_pair(phases, again, generations, kept)
    answered = sum(1 for end in ended if end.answered)
    measured = scoring.Measured(
        samples=samples,
        floor=scoring.no_cache_floor(phases, again, params, samples),
        hits=CacheHits(len(kept), len(batch), spec.min_cache_hit_ratio),
        hit_label="abandoned-prefix",
        warnings=(_answered_anyway(answered, len(batch)),) if answered else (),
    )
    return scoring.judge(context, measured)


def _cannot_tell(ended: list[HungUp], chunk: object) -> str | None:
    late = sum(1 for end in ended if not end.finished)
    if late:
        return (
            f"the server was not done with {late} of {len(ended)} request(s) hung up on "
            f"within {HANG_UP_WAIT_S:g} s: what they left in the cache is unknown"
        )
    if all(end.answered for end in ended):
        return (
            f"the server answered all {len(ended)} request(s) the client hung up on: none was "
            "dropped mid-prefill, so no abandoned prefill was exercised (prompts must be "
            f"longer than one prefill chunk, chunked_prefill_size={chunk!r})"
        )
    return None


def _answered_anyway(answered: int, total: int) -> str:
    return (
        f"{answered} of {total} request(s) hung up on were answered anyway (finished before "
        "the server noticed): only the others exercise an abandoned prefill"
    )

"""`concurrent_prefix_hit`: prompts that share prefixes, sent at once on their own connections.

One /generate call is a batch the client made; requests that arrive together are what the
server's scheduler orders and batches itself, as real traffic does, and which of them it
serves first decides what the others reuse. The other checks never send two requests at
once, so none can see a bug of that shape (explore finds them with `--concurrent`).

Each round: flush; the `warm` prompts in one batch with no new tokens (what must be cached
first); then the prompts sent apart - each its own /generate on its own connection, released
together (run/engines/apart.py), each bounded as every request is - keeping each answer's
`cached_tokens` and the order the answers came back. After `rounds` rounds every sequence of
every round is replayed uncached and each generated logprob compared (as the cache checks
do), and every `cached_tokens` is judged against what was sent before it: a whole number of
pages, at most the page-aligned prefix its prompt shares with a warmed prompt or another
request of its round (prompt and answer), never the whole prompt.

A request that reused more than the warmed prompts allow reused what only another request
of its round could have left: a *concurrent hit*. The shape the test asserts is a round with
one, when its prompts share a page with each other beyond what is warmed; otherwise (they
share only warmed prefixes) a round with any hit, beside requests sent at once. A round that
shows it *reached* it; a test none of whose rounds did is `not_exercised`
(results.verdict.unconcurrent), never a pass. Every round is recorded as observed
(`TestResult.concurrency`): the verdict may depend on the order, so the message says how many
rounds failed and how many reached the shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from msgspec import structs

from kl_bitexact.results import verdict
from kl_bitexact.results.model import CacheHits, Concurrency, ConcurrentRound, TestResult
from kl_bitexact.run.checks import metrics, prompts, scoring
from kl_bitexact.run.checks.metrics import Sample
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.apart import Apart, SendsApart
from kl_bitexact.run.engines.base import Engine, SamplingParams
from kl_bitexact.suite.model import TestSpec

Prompt = tuple[int, ...]
NO_APART = (
    "this engine adapter cannot send requests apart (sglang's native API only), so nothing "
    "was sent at once"
)
NO_SHAPE = (
    "no request can reuse anything: the prompts share no whole page with each other or with "
    "the warmed prompts"
)
CONCURRENT_SHAPE = "a concurrent hit (a request reusing a prefix only another of its round left)"
WARM_SHAPE = "a cache hit on the warmed prompts beside requests sent at once"
NOT_REACHED_HINT = (
    "the server served the requests together, or always in an order in which none reuses "
    "another's prefix: raise `rounds` (at most 20), or check how its scheduler batches "
    "requests that arrive at once"
)
# Problems quoted in the message; results.json keeps every round.
MAX_PROBLEMS = 3


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    engine = phases.engine
    context = scoring.begin(engine, spec, test_id)
    if not context.geometry.radix_cache:
        return scoring.not_run(context, scoring.RADIX_DISABLED)
    if not isinstance(engine, SendsApart):
        return scoring.not_run(context, NO_APART)
    batch = _prompts(spec, context)
    page = context.geometry.page_size
    shape = _shape(batch, spec.warm, page)
    if shape is None:
        return scoring.not_run(context, NO_SHAPE)
    params = scoring.sampling(spec)
    sent = [_round(engine, spec.warm, batch, params, r) for r in range(spec.rounds)]
    generations = [answer for one in sent for answer in one.generations]
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    every = [prompt for _ in sent for prompt in batch]
    samples = scoring.replay_and_pair(phases, every, generations, range(len(every)))
    seen = Concurrency(
        shape,
        tuple(
            _observed(one, batch, spec.warm, page, shape, samples, r) for r, one in enumerate(sent)
        ),
    )
    measured = scoring.Measured(
        samples=samples,
        floor=scoring.no_cache_floor(phases, every, params, samples),
        hits=CacheHits(
            sum(1 for g in generations if g.cached_tokens), len(every), spec.min_cache_hit_ratio
        ),
        hit_label="prefix",
        problems=_miscounts(sent, batch, spec.warm, page),
        warnings=_order_warnings(seen),
        concurrency=seen,
    )
    result = verdict.exercised(scoring.judge(context, measured))
    hint = result.hint or (NOT_REACHED_HINT if verdict.unconcurrent(result) else "")
    return structs.replace(result, message=f"{result.message}; {_rounds_text(seen)}", hint=hint)


def _prompts(spec: TestSpec, context: scoring.Context) -> list[Prompt]:
    """The suite's prompts as given, or a shared prefix of `prefix_tokens` and then each
    prompt's own tokens (lengths from `prompt_tokens`)."""
    if spec.prompts is not None or not spec.prefix_tokens:
        return prompts.single_turn(spec, context.info)
    import numpy as np  # seeded ids only, as prompts.single_turn

    rng = np.random.default_rng(spec.seed)
    vocab = prompts.vocab_size(spec, context.info)
    prefix = prompts.token_ids(rng, spec.prefix_tokens, vocab)
    low, high = spec.prompt_tokens
    lengths = rng.integers(low, high + 1, size=spec.samples)
    return [prefix + prompts.token_ids(rng, int(length), vocab) for length in lengths]


def _round(
    engine: Engine,
    warm: Sequence[Prompt],
    batch: Sequence[Prompt],
    params: SamplingParams,
    index: int,
) -> Apart:
    """Round `index`: flush, warm, then every prompt sent apart, released together, the
    threads started from prompt `index` on (a server that serves what arrives first then
    gives each prompt its turn at the front)."""
    assert isinstance(engine, SendsApart), "run() checked the adapter"
    engine.flush()
    if warm:
        engine.generate(warm, dataclasses.replace(params, max_new_tokens=0))
    return engine.send_apart(batch, params, first=index % max(len(batch), 1))


def _shape(batch: Sequence[Prompt], warm: Sequence[Prompt], page: int) -> str | None:
    """What a round must show to exercise the test (None: nothing can be reused at all)."""
    from_warm = [reusable(prompt, warm, page) for prompt in batch]
    among = [
        reusable(prompt, [other for j, other in enumerate(batch) if j != i], page)
        for i, prompt in enumerate(batch)
    ]
    if any(a > w for a, w in zip(among, from_warm, strict=True)):
        return CONCURRENT_SHAPE
    return WARM_SHAPE if any(from_warm) else None


def reusable(prompt: Sequence[int], before: Sequence[Sequence[int]], page: int) -> int:
    """The largest cached prefix the geometry allows `prompt` after `before` was served."""
    return metrics.reusable_prefix(len(prompt), metrics.shared_prefix(prompt, before), page)


def _served_before(one: Apart, batch: Sequence[Prompt], i: int) -> list[Prompt]:
    """The other requests of the round, each prompt and answer: any may have been served
    before request `i` (a server may schedule them in any order, or together)."""
    return [
        tuple(prompt) + answer.output_ids
        for j, (prompt, answer) in enumerate(zip(batch, one.generations, strict=True))
        if j != i
    ]


def _observed(
    one: Apart,
    batch: Sequence[Prompt],
    warm: Sequence[Prompt],
    page: int,
    shape: str,
    samples: Sequence[Sample],
    index: int,
) -> ConcurrentRound:
    """The round as observed: hits, the order answers came back, what differed."""
    count = len(batch)
    cached = tuple(answer.cached_tokens for answer in one.generations)
    concurrent = [
        i for i, prompt in enumerate(batch) if (cached[i] or 0) > reusable(prompt, warm, page)
    ]
    diverged = tuple(
        s.index - index * count
        for s in samples
        if index * count <= s.index < (index + 1) * count and _differs(s)
    )
    miscounted = tuple(i for i, _ in _wrong(one, batch, warm, page))
    hit = any(cached) if shape == WARM_SHAPE else bool(concurrent)
    return ConcurrentRound(cached, one.completed, len(concurrent), hit, diverged, miscounted)


def _differs(sample: Sample) -> bool:
    return any(a != b for _, a, b in sample.compared())


def _wrong(
    one: Apart, batch: Sequence[Prompt], warm: Sequence[Prompt], page: int
) -> list[tuple[int, int]]:
    """Each request (and the most it may reuse) whose cached_tokens the geometry does not
    allow: not a whole number of pages, or more than anything sent before it shares."""
    found = []
    for i, (prompt, answer) in enumerate(zip(batch, one.generations, strict=True)):
        allowed = reusable(prompt, [*warm, *_served_before(one, batch, i)], page)
        cached = answer.cached_tokens or 0
        if cached > allowed or cached % page:
            found.append((i, allowed))
    return found


def _miscounts(
    sent: Sequence[Apart], batch: Sequence[Prompt], warm: Sequence[Prompt], page: int
) -> tuple[str, ...]:
    found = []
    for r, one in enumerate(sent):
        for i, allowed in _wrong(one, batch, warm, page):
            pages = f"a multiple of the page size {page}, " if page > 1 else ""
            found.append(
                f"round {r + 1} request {i}: expected cached_tokens {pages}at most {allowed}, "
                f"got {one.generations[i].cached_tokens}"
            )
    return tuple(found)


def _order_warnings(seen: Concurrency) -> tuple[str, ...]:
    """What the order the server chose made of the rounds, when rounds differ."""
    total = len(seen.rounds)
    found = []
    if 0 < seen.reached < total:
        found.append(
            f"{total - seen.reached} of {total} round(s) did not reach {seen.shape}: only the "
            "others exercise it"
        )
    if 0 < seen.failed < total:
        found.append(
            f"the outcome depends on the order the server served the requests in: "
            f"{seen.failed} of {total} round(s) differed from the replay or miscounted a hit"
        )
    return tuple(found)


def _rounds_text(seen: Concurrency) -> str:
    total = len(seen.rounds)
    orders = " ".join(",".join(map(str, one.completed)) for one in seen.rounds[:5])
    more = " ..." if total > 5 else ""
    return (
        f"{seen.failed} of {total} concurrent round(s) differed from the replay or miscounted "
        f"a hit, {seen.reached} of {total} reached {seen.shape}; answers came back in the "
        f"order {orders}{more}"
    )

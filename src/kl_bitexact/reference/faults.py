"""State-layer bugs the engine can reproduce on demand (`--fault NAME`).

Each state-layer fault touches only the cached path (prefix match, cache insertion, host
tier), so an uncached prefill is never affected, and each one is modelled on a real bug
class from sglang's history. A suite that does not go red under a fault cannot detect that
class. `order-dependent-decode` is different: it breaks run-to-run determinism (the class
`run --repeat` measures), not the cache.
"""

from __future__ import annotations

from enum import Enum

from kl_bitexact.errors import did_you_mean


class Fault(Enum):
    HICACHE_LOSSY = "hicache-lossy"
    CHECKPOINT_OFF_BY_ONE = "checkpoint-off-by-one"
    SPEC_OVERSHOOT_CACHED = "spec-overshoot-cached"
    SWA_EARLY_RELEASE = "swa-early-release"
    BRANCH_CHECKPOINT_REUSE = "branch-checkpoint-reuse"
    ORDER_DEPENDENT_DECODE = "order-dependent-decode"
    ONE_PAGE_PREFIX_MIXED_BATCH = "one-page-prefix-mixed-batch"
    RESTORE_AFTER_EVICTION = "restore-after-eviction"
    REUSE_AFTER_ABANDONED_PREFILL = "reuse-after-abandoned-prefill"
    CACHED_TOKENS_OFF_BY_ONE = "cached-tokens-off-by-one"

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self]


DESCRIPTIONS: dict[Fault, str] = {
    Fault.HICACHE_LOSSY: "the host-tier round trip stores pages and states as float16, "
    "so hits reloaded from host memory lose precision",
    Fault.CHECKPOINT_OFF_BY_ONE: "a recurrent-state checkpoint labelled position q holds the "
    "state after q-1 tokens",
    Fault.SPEC_OVERSHOOT_CACHED: "with speculative decoding, the recurrent state after the "
    "overshoot tokens is cached at the last page boundary of the returned tokens",
    Fault.SWA_EARLY_RELEASE: "sliding-window slots of a page are released as soon as its first "
    "token leaves the window, and a hit still reuses the incomplete window",
    Fault.BRANCH_CHECKPOINT_REUSE: "where a request leaves the tree at a branch point, the "
    "matcher reuses the nearest checkpoint down a sibling branch",
    Fault.ORDER_DEPENDENT_DECODE: "a decode step rounds its logprobs one ulp up or not as a "
    "stream drawn over the server's lifetime says, so an answer depends on every request "
    "served before it (a reduction whose split follows load or timing)",
    Fault.ONE_PAGE_PREFIX_MIXED_BATCH: "a request whose cached prefix is exactly one page "
    "long, served in one batch with a request that reuses nothing, restores that page with "
    "its last token's keys and values zeroed (sglang issue 22819: prefix_len equal to the KV "
    "block size beside prefix_len 0 requests)",
    Fault.RESTORE_AFTER_EVICTION: "a shared prefix (a page two cached sequences branch "
    "from) that pressure evicted to the host tier comes back onto the device one slot late: "
    "each token's keys and values land on the next position, and every later hit on that "
    "prefix reads them until a flush (sglang PR 38355: KV pages corrupted under memory "
    "pressure, read by every later request with the same prefix)",
    Fault.REUSE_AFTER_ABANDONED_PREFILL: "a request whose client disconnects mid-prefill "
    "(between prefill chunks) is inserted into the radix cache as if its prefill had "
    "completed: pages past the last computed chunk hold keys never written and later "
    "boundaries the state of that chunk, so the next request with the prefix reuses them "
    "(sglang PR 38355: chunked-prefill radix insert racing an abort)",
    Fault.CACHED_TOKENS_OFF_BY_ONE: "a request whose reused prefix ends exactly on a prefill "
    "chunk boundary (a multiple of --chunked-prefill-size) is reported with one cached token "
    "fewer than it reused; every token is unchanged (sglang PR 24910's CI log: expected "
    "cached_tokens=4864, got 4863)",
}

# Faults no bundled suite is built to catch (the four checks stay green with them on):
# shapes only `kl-bitexact explore` aims at (docs/explore.md).
HIDDEN_FROM_BUNDLED_SUITES = frozenset(
    {
        Fault.ONE_PAGE_PREFIX_MIXED_BATCH,
        Fault.RESTORE_AFTER_EVICTION,
        Fault.REUSE_AFTER_ABANDONED_PREFILL,
        Fault.CACHED_TOKENS_OFF_BY_ONE,
    }
)


def parse_fault(name: str) -> Fault:
    """argparse type: a fault by its command-line name."""
    for fault in Fault:
        if fault.value == name:
            return fault
    names = [fault.value for fault in Fault]
    close = did_you_mean(name, names)
    raise ValueError(f"unknown fault {name!r}: {close or 'known: ' + ', '.join(names)}")


def help_text() -> str:
    lines = [f"  {fault.value}: {fault.description}" for fault in Fault]
    return "faults (--fault NAME, repeatable):\n" + "\n".join(lines)

"""Suites as values: the specs a suite file becomes and the names each choice may take.
Nothing here reads a file; `load.py` builds these from YAML through `reader.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit


class Name(str, Enum):
    """A word a suite file writes, kept as that word: equal to it, hashed, formatted and
    JSON-encoded like it (so results.json, messages and `one of:` lists read as they did
    with plain strings); only `repr` tells a member from the string."""

    def __str__(self) -> str:
        return str.__str__(self)  # the word, not `CheckName.MATCH` (Python 3.11+ Enum)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class CheckName(Name):
    """`tests[].check`; run/checks.CHECKS holds one function per member."""

    MATCH = "match"
    PREFILL_CACHE_HIT = "prefill_cache_hit"
    DECODE_CACHE_HIT = "decode_cache_hit"
    MULTITURN = "multiturn"
    PRESSURE_RESTORE = "pressure_restore"
    ABANDONED_PREFIX_REUSE = "abandoned_prefix_reuse"
    CONCURRENT_PREFIX_HIT = "concurrent_prefix_hit"


# Checks the bundled example does not run: they exist to hand back what `explore` finds,
# and would catch the faults kept hidden from the bundled suites for it to find
# (tests/run/test_pressure_restore.py, test_abandoned_prefix_reuse.py and
# test_concurrent_prefix_hit.py run them against real servers).
NOT_BUNDLED = frozenset(
    {
        CheckName.PRESSURE_RESTORE,
        CheckName.ABANDONED_PREFIX_REUSE,
        CheckName.CONCURRENT_PREFIX_HIT,
    }
)


class EngineName(Name):
    """`server.engine`; run/engines.ADAPTERS holds one adapter per member."""

    SGLANG = "sglang"
    OPENAI = "openai"
    REFERENCE = "reference"


class DialectName(Name):
    """`server.dialect` of `engine: openai`; run/engines/openai.DIALECTS holds one per member."""

    VLLM = "vllm"
    LLAMACPP = "llamacpp"


class CacheAssert(Name):
    """`cache_assert` of a multiturn test: which cached-token rule a turn is held to
    (run/checks/multiturn.RULES holds one pair of rules per member)."""

    EXACT = "exact"
    MAMBA = "mamba"


class Flow(Name):
    """`flow` of a multiturn test: ours (turn 1 in waves per branch index, detects more) or
    sglang's kl_multiturn_utils prefill-cache-hit helper, request for request."""

    BRANCH_WAVES = "branch-waves"
    SGLANG = "sglang"


class Gate(Name):
    """`gate` of a test (or of its suite's server): how a cache check's numbers are judged.

    `bit-exact` (the default): by the KL threshold, and by every bit with `exact: true`.
    `noise-floor`, for engines that are not batch-invariant: by the drift the same prompts
    show with no cache (the test's measured floor): it fails when its KL exceeds
    `floor_factor` x the floor's KL + `floor_margin`. `match`, which measures no cache, keeps
    its threshold either way (docs/suites.md, "Gate")."""

    BIT_EXACT = "bit-exact"
    NOISE_FLOOR = "noise-floor"


# A function a test exists to exercise (`reach:`): `package.module:Class.method`, the form
# entry points use; no `<locals>` (a nested function cannot be reached from outside).
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
FUNCTION_NAME = re.compile(rf"{_DOTTED}:{_DOTTED}")
FUNCTION_EXAMPLE = "sglang.srt.model_executor.cuda_graph_runner:CudaGraphRunner.capture"


def is_function_name(text: str) -> bool:
    return FUNCTION_NAME.fullmatch(text) is not None


class Condition(Name):
    """How an `expect` entry's reported value is compared with the one the suite states."""

    EQUALS = "equals"  # `fact: value`
    AT_MOST = "at_most"  # `fact: {at_most: N}`
    AT_LEAST = "at_least"  # `fact: {at_least: N}`
    ONE_OF = "one_of"  # `fact: {one_of: [a, b]}`


@dataclass(frozen=True)
class Expect:
    """One fact a test states about its server (`server.expect`, a test's `expect`): the
    key its server reports (dots reach into nested answers: `cuda_graph_config.prefill.
    backend`), the condition, and the stated value as canonical JSON (so a spec stays
    hashable and compares by value)."""

    name: str
    condition: Condition
    value: str


PORT_PLACEHOLDER = "{port}"
URL_EXAMPLE = "http://127.0.0.1:30000"


def is_server_url(url: str) -> bool:
    """Could `url` be a server's address: http(s), a host, a port in range? Checked
    before any wait, instead of 30 s of retries against "notaurl"."""
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok


@dataclass(frozen=True)
class ServerSpec:
    """How to reach the server: a command to launch (with `{port}`) or a running URL."""

    engine: EngineName
    command: tuple[str, ...] = ()
    # engine: openai only - vllm | llamacpp; None: told by the server's endpoints.
    dialect: DialectName | None = None
    env: tuple[tuple[str, str], ...] = ()
    base_url: str | None = None
    startup_timeout: float = 1800.0
    request_timeout: float = 1800.0
    # The suite's tests' `gate` where they do not give their own (the engine's nature).
    gate: Gate = Gate.BIT_EXACT


@dataclass(frozen=True)
class TestSpec:
    """One check with its parameters. Prompts are either synthetic or read from a file."""

    __test__ = False  # not a pytest test class despite the name

    name: str
    check: CheckName
    samples: int = 32  # multiturn sends groups x branches instead
    prompt_tokens: tuple[int, int] = (1024, 1024)  # inclusive length range
    prompts: tuple[tuple[int, ...], ...] | None = None
    max_new_tokens: int = 256
    kl_threshold: float = 1e-9
    min_cache_hit_ratio: float = 0.99
    exact: bool = False
    blocked_by: tuple[str, ...] = ()
    seed: int = 0
    temperature: float = 1.0
    vocab_size: int = 32000
    # Appended between turn 1's output and turn 2 (sglang encodes ","); any token works.
    separator_ids: tuple[int, ...] = (11,)
    groups: int = 3
    branches: int = 3
    prefix_tokens: int = 512
    turn_suffix_tokens: tuple[int, ...] = (512, 256)
    # pressure_restore: prompts of this many times the server's device pool are sent
    # between seeding a shared prefix and reusing it, so that the prefix is evicted.
    pressure: float = 1.5
    # concurrent_prefix_hit: the prompts sent before each round, together, no new tokens (what
    # must be cached: explore's earlier steps), and how many rounds of requests sent at once.
    warm: tuple[tuple[int, ...], ...] = ()
    rounds: int = 3
    cache_assert: CacheAssert = CacheAssert.EXACT
    flow: Flow = Flow.BRANCH_WAVES
    gate: Gate = Gate.BIT_EXACT
    # gate: noise-floor: a cache test fails when its KL > floor_factor x floor KL + floor_margin.
    floor_factor: float = 4.0
    floor_margin: float = 1e-9
    # The functions this test exists to exercise (`module:qualname`, the suite's `reach:`
    # first); kl-bitexact records which of them ran (docs/reach.md).
    reach: tuple[str, ...] = ()
    # The facts the test depends on: its suite's `server.expect` with its own `expect` over
    # them (by name), sorted by name. Checked against what the server reports before a
    # result is trusted (run/facts.py).
    expect: tuple[Expect, ...] = ()


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    server: ServerSpec
    tests: tuple[TestSpec, ...]
    est_time: float | None = None

"""Suites as values: the specs a suite file becomes and the names each choice may take.
Nothing here reads a file; `load.py` builds these from YAML through `reader.py`."""

from __future__ import annotations

from dataclasses import dataclass

ENGINES = ("sglang", "openai", "reference")
CHECKS = ("match", "prefill_cache_hit", "decode_cache_hit", "multiturn")
CACHE_ASSERTS = ("exact", "mamba")
# multiturn request flows: ours (turn 1 in waves per branch index, detects more) and sglang's
# kl_multiturn_utils prefill-cache-hit helper, request for request.
FLOWS = ("branch-waves", "sglang")
DIALECTS = ("vllm", "llamacpp")  # of the openai engine
PORT_PLACEHOLDER = "{port}"


@dataclass(frozen=True)
class ServerSpec:
    """How to reach the server: a command to launch (with `{port}`) or a running URL."""

    engine: str
    command: tuple[str, ...] = ()
    # engine: openai only - vllm | llamacpp; None: told by the server's endpoints.
    dialect: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    base_url: str | None = None
    startup_timeout: float = 1800.0
    request_timeout: float = 1800.0


@dataclass(frozen=True)
class TestSpec:
    """One check with its parameters. Prompts are either synthetic or read from a file."""

    __test__ = False  # not a pytest test class despite the name

    name: str
    check: str
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
    cache_assert: str = "exact"
    flow: str = "branch-waves"


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    server: ServerSpec
    tests: tuple[TestSpec, ...]
    est_time: float | None = None

"""The failing batch of a shrunk workload as a suite file `kl-bitexact run` runs (pure).

The four checks can express "a batch of prompts, each served after its own prompt was
cached": `prefill_cache_hit` warms the prompts (cold, no new tokens), then generates them
in one batch and replays each uncached. That is the shape handed back; whether it still
fails is measured by `reproduces` (explore runs the same phases) and recorded, never
assumed. A batch sent apart (concurrent requests) is handed back as `concurrent_prefix_hit`
over it, the workload's earlier sequences warmed first; a miscounted hit as `multiturn`, a
divergence after pressure as `pressure_restore`, after requests hung up on as
`abandoned_prefix_reuse`. Shapes none expresses (flushes between turns) are handed back as
the batch warmed by itself: docs/explore.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from kl_bitexact.explore.geometry import Geometry

# The facts the handed-back test depends on, read back by `run` before it trusts a result.
EXPECTED_FACTS = (
    "enable_deterministic_inference",
    "page_size",
    "mamba_track_interval",
    "chunked_prefill_size",
)


def suite_text(
    *,
    name: str,
    server: Mapping[str, Any],
    prompts_file: str,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    geometry: Geometry,
    located: str,
) -> str:
    """The suite file's YAML: one `prefill_cache_hit` test over the failing batch."""
    test = {
        "name": "explored_batch",
        "check": "prefill_cache_hit",
        "samples": len(prompts),
        "prompts": prompts_file,
        "max_new_tokens": max_new_tokens,
        "temperature": 0.0,
        "exact": True,
        # Cold requests are part of the shape: only one hit is needed.
        "min_cache_hit_ratio": 0.0,
    }
    return _suite_file(name, server, _expected_facts(geometry), located, test)


def prompts_text(prompts: Sequence[Sequence[int]]) -> str:
    return json.dumps([list(prompt) for prompt in prompts]) + "\n"


def cached_tokens_suite_text(
    *,
    name: str,
    server: Mapping[str, Any],
    prefix_tokens: int,
    suffix_tokens: int,
    max_new_tokens: int,
    geometry: Geometry,
    located: str,
) -> str:
    """The suite file's YAML for a cache hit the geometry does not allow: one `multiturn`
    test of one conversation whose prefix is the expected hit, held to the exact rule
    (turn 1 must reuse exactly the page-aligned prefix, as sglang's multi-turn kits
    assert), so a count one short fails it though every token matches."""
    test = {
        "name": "explored_cached_tokens",
        "check": "multiturn",
        "groups": 1,
        "branches": 1,
        "prefix_tokens": prefix_tokens,
        "turn_suffix_tokens": [suffix_tokens],
        "max_new_tokens": max_new_tokens,
        "vocab_size": geometry.vocab_size,
        "temperature": 0.0,
        "exact": True,
        "cache_assert": "exact",
        "min_cache_hit_ratio": 1.0,
    }
    return _suite_file(name, server, _expected_facts(geometry), located, test)


def abandoned_suite_text(
    *,
    name: str,
    server: Mapping[str, Any],
    prompts_file: str,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    geometry: Geometry,
    located: str,
) -> str:
    """The suite file's YAML for a divergence after requests hung up on mid-prefill: one
    `abandoned_prefix_reuse` test over the prompts the workload hung up on (each hung up on
    again, then asked for with one more token, so its whole prompt is a reusable prefix)."""
    test = {
        "name": "explored_abandoned_prefill",
        "check": "abandoned_prefix_reuse",
        "samples": len(prompts),
        "prompts": prompts_file,
        "max_new_tokens": max_new_tokens,
        "temperature": 0.0,
        "exact": True,
        # A healthy server may keep nothing of a dropped request: no hit is needed.
        "min_cache_hit_ratio": 0.0,
    }
    return _suite_file(name, server, _expected_facts(geometry), located, test)


# Rounds of the handed-back concurrent test: the order the server serves requests sent at
# once decides their hits, so the round is repeated and any round that fails fails it.
APART_ROUNDS = 10


def apart_suite_text(
    *,
    name: str,
    server: Mapping[str, Any],
    prompts_file: str,
    prompts: Sequence[Sequence[int]],
    warm_file: str | None,
    max_new_tokens: int,
    geometry: Geometry,
    located: str,
) -> str:
    """The suite file's YAML for a finding whose failing batch was sent apart: one
    `concurrent_prefix_hit` test over that batch's prompts, sent at once on their own
    connections for APART_ROUNDS rounds, each after the sequences the workload had served
    since its last flush (`warm_file`) are cached again."""
    test: dict[str, Any] = {
        "name": "explored_apart",
        "check": "concurrent_prefix_hit",
        "samples": len(prompts),
        "prompts": prompts_file,
        **({"warm": warm_file} if warm_file else {}),
        "rounds": APART_ROUNDS,
        "max_new_tokens": max_new_tokens,
        "temperature": 0.0,
        "exact": True,
        "min_cache_hit_ratio": 0.0,
    }
    return _suite_file(name, server, _expected_facts(geometry), located, test)


def _suite_file(
    name: str,
    server: Mapping[str, Any],
    expect: dict[str, Any],
    located: str,
    test: dict[str, Any],
) -> str:
    """A handed-back suite file: one suite of one test on the explored server, expecting the
    facts it reported (under `gate: noise-floor` when it is not deterministic, the rule
    explore judged it by), under a comment saying what explore found."""
    block = {**server, "expect": expect}
    if expect.get("enable_deterministic_inference") is False:
        # Judged as explore judged it: the cache test's KL against its noise floor.
        block["gate"] = "noise-floor"
    suite = {"name": name, "server": block, "tests": [test]}
    header = f"# Found by `kl-bitexact explore`: {located}\n"
    return header + yaml.safe_dump([suite], sort_keys=False)


def _expected_facts(geometry: Geometry) -> dict[str, Any]:
    facts = geometry.as_dict()
    expect: dict[str, Any] = {
        key: facts[key] for key in EXPECTED_FACTS if facts.get(key) is not None
    }
    expect["disable_radix_cache"] = False
    return expect


def pressure_suite_text(
    *,
    name: str,
    server: Mapping[str, Any],
    prefix_tokens: int,
    suffix_tokens: int,
    pressure: float,
    max_new_tokens: int,
    geometry: Geometry,
    located: str,
) -> str:
    """The suite file's YAML for a divergence after pressure: one `pressure_restore` test
    whose shared prefix is the hit that diverged, two branches from it, the pressure the
    workload sent (as a multiple of the pool), and a probe that must come back from the
    host tier and match its replay."""
    expect = _expected_facts(geometry)
    # The pool the pressure is sized from, and the host tier it sends the prefix to.
    expect["enable_hierarchical_cache"] = True
    if geometry.pool_tokens is not None:
        expect["max_total_tokens"] = {"at_most": geometry.pool_tokens}
    test = {
        "name": "explored_pressure",
        "check": "pressure_restore",
        "groups": 1,
        "branches": 2,
        "prefix_tokens": prefix_tokens,
        "turn_suffix_tokens": [suffix_tokens],
        "pressure": pressure,
        "max_new_tokens": max_new_tokens,
        "vocab_size": geometry.vocab_size,
        "temperature": 0.0,
        "exact": True,
        "min_cache_hit_ratio": 1.0,
    }
    return _suite_file(name, server, expect, located, test)

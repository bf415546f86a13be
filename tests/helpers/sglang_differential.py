"""What the differential tests against sglang's helpers share (tests/differential): the
reference servers they compare on, the prompts standing in for sglang's LongBench cache,
one tool's outcome and how sglang's printed numbers become one, and the `requests` stand-in
that pins sglang's sampling seed. Their fixtures are in tests/differential/conftest.py."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

MODEL = "kl-bitexact-reference"
SAMPLES = 4
MAX_NEW_TOKENS = 20
THRESHOLD = 1e-9
# Turn-1 prompt lengths L whose turn-2 hit ends at L+1 (a miss by sglang's `> L + 1`) or L+2
# (a hit) with 8 new tokens: the decode checkpoint lands on the page after the prompt.
BOUNDARY_MODEL = "kl-bitexact-reference-boundary"
BOUNDARY_LENGTHS = (46, 47, 62, 63, 78)
BOUNDARY_NEW_TOKENS = 8
DETERMINISTIC = ("--enable-deterministic-inference",)
SERVERS: dict[str, tuple[str, ...]] = {
    "deterministic": DETERMINISTIC,
    "plain": (),
    "hicache-lossy": (
        *DETERMINISTIC,
        *("--enable-hierarchical-cache", "--max-total-tokens", "384"),
        *("--fault", "hicache-lossy"),
    ),
    "checkpoint-off-by-one": (*DETERMINISTIC, "--fault", "checkpoint-off-by-one"),
    "swa-early-release": (*DETERMINISTIC, "--fault", "swa-early-release"),
    "branch-checkpoint-reuse": (*DETERMINISTIC, "--fault", "branch-checkpoint-reuse"),
    "track-aligned": (*DETERMINISTIC, "--mamba-track-interval", "32"),
    "track-misaligned": (*DETERMINISTIC, "--mamba-track-interval", "12"),
    "eagle": (*DETERMINISTIC, "--speculative-algorithm", "EAGLE"),
    "eagle-overshoot": (
        *DETERMINISTIC,
        *("--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"),
        *("--fault", "spec-overshoot-cached"),
    ),
}
LISTENING = "kl-bitexact reference server listening on "


@dataclass(frozen=True)
class Outcome:
    """One tool's numbers for one check on one server."""

    kl_per_sample: tuple[float, ...] | None
    kl_div: float | None
    hits: int | None
    passed: bool


def longbench_prompts(model: str = MODEL) -> list[list[int]]:
    """48 prompts of token ids 1..319, fixed: 40..160 long, or the boundary lengths first."""
    rng = np.random.default_rng(15)
    lengths = [int(rng.integers(40, 161)) for _ in range(48)]
    if model == BOUNDARY_MODEL:
        lengths[: len(BOUNDARY_LENGTHS)] = BOUNDARY_LENGTHS
    return [rng.integers(1, 320, length).tolist() for length in lengths]


def longbench_file(model: str) -> str:
    """sglang's cache name: its helpers always load DEFAULT_NUM_SAMPLES (48) prompts of
    DEFAULT_PROMPT_TOKENS (3000), then take the first max_samples."""
    return f"input_ids_{model}_3000_48.json"


class SeededRequests:
    """sglang's helpers send no `sampling_seed`, so the reference engine draws one per request;
    greedy tokens do not depend on it, but EAGLE's draft (hence which tokens overshoot into
    the cache) does. Both tools are pinned to seed 0: ours by its suite `seed`, sglang's by
    this stand-in for the `requests` module its helpers call (it only adds the seed)."""

    def __init__(self, real: ModuleType) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def post(self, url: str, json: Any = None, **kwargs: Any) -> Any:
        if isinstance(json, dict) and isinstance(json.get("sampling_params"), dict):
            json = {**json, "sampling_params": {"sampling_seed": 0, **json["sampling_params"]}}
        return self.real.post(url, json=json, **kwargs)


def parse_printed(text: str, check: str, passed: bool, samples: int = SAMPLES) -> Outcome:
    kl_line = re.search(r"^kl_divs=(.*)$", text, re.MULTILINE)
    avg_line = re.search(r"^avg_kl_div=(.*)$", text, re.MULTILINE)
    namespace: dict[str, Any] = {"np": np, "nan": math.nan, "inf": math.inf}
    kl_divs = eval(kl_line.group(1), namespace) if kl_line else None  # our own capture
    avg = float(eval(avg_line.group(1), namespace)) if avg_line else None
    misses = len(re.findall(r"cache miss for prompt \d+, skipping", text))
    hits = None if check == "match" else samples - misses
    per_sample = tuple(float(value) for value in kl_divs) if kl_divs is not None else None
    return Outcome(per_sample, avg, hits, passed)

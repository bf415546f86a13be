"""Recover KL metrics from the lines sglang's KL helpers print (pure).

sglang's `python/sglang/test/kl_test_utils.py` helpers report only through print() and
assert messages. The lines recognised here, in both wordings seen in sglang's history:

    Running test_input_output_logprobs_match_decode_cache_hit with 32 prompts
    Decode cache miss for prompt 7, skipping            (older: "..., skipping this prompt")
    kl_divs=[np.float64(0.0), ...]                      (numpy 1.x prints bare floats)
    avg_kl_div=0.0
    ACC_THRESHOLDS={'kl_div': 0.002}
    Too few decode cache hits: 16/32                    (older: "..., len(new_input_ids)=16, ...")
    avg_kl_div=0.11 > threshold=0.002 for MODEL HELPER  (older: "... is greater than threshold=...")
    Radix cache is disabled, skipping test

A metric that is not printed is absent (None), never zero: an absent KL must not read as
a perfect one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from kl_bitexact.suite.model import CheckName

# Each "Running <helper> with N prompts" line opens one block: one helper call.
_RUNNING = re.compile(
    r"^Running test_input_output_logprobs_match(?:_(?P<kind>prefill|decode)_cache_hit)?"
    r" with\s+(?P<total>\d+)\s+prompts\s*$"
)
_MISS = re.compile(r"^(?P<kind>Prefill|Decode) cache miss for prompt (?P<index>\d+), skipping")
_TOO_FEW = re.compile(
    r"Too few (?P<kind>prefill|decode) cache hits"
    r"(?::\s*(?P<hit>\d+)/(?P<total>\d+)|,\s*len\(\w+\)=(?P<hit_old>\d+),\s*len\(\w+\)=(?P<total_old>\d+))"
)
_KL_DIVS = re.compile(r"^kl_divs=\[(?P<body>.*)$")
_AVG = re.compile(r"^avg_kl_div=(?P<value>\S+)\s*$")
_THRESHOLDS = re.compile(r"^ACC_THRESHOLDS=.*?['\"]kl_div['\"]\s*:\s*(?P<value>[^,}\s]+)")
_OVER = re.compile(
    r"avg_kl_div=(?P<value>\S+) (?:>|is greater than) threshold=(?P<threshold>[^\s,]+)"
)
_DISABLED = re.compile(r"^Radix cache is disabled, skipping")
# numpy 2 prints list items as np.float64(0.0); numpy 1 as 0.0.
_NUMPY_SCALAR = re.compile(r"np\.float\d*\((?P<value>[^()]*)\)")

CHECK_BY_KIND = {
    None: CheckName.MATCH.value,
    "prefill": CheckName.PREFILL_CACHE_HIT.value,
    "decode": CheckName.DECODE_CACHE_HIT.value,
}
# "Radix cache is disabled, skipping test" (sglang >= 0.5) does not say which helper printed it.
UNNAMED_CACHE_CHECK = ""


@dataclass(frozen=True)
class HitCount:
    hit: int
    total: int


@dataclass(frozen=True)
class KLBlock:
    """What one helper call printed; every field None/empty when not printed."""

    check: str
    prompts: int | None = None
    misses: frozenset[int] = frozenset()
    too_few: HitCount | None = None
    kl_per_sample: tuple[float, ...] | None = None
    kl_div: float | None = None
    kl_threshold: float | None = None
    cache_disabled: bool = False
    warnings: tuple[str, ...] = ()

    def cache_hits(self) -> HitCount | None:
        """Hits out of prompts: the assertion's count, else prompts minus printed misses."""
        if self.too_few is not None:
            return self.too_few
        if self.check == CheckName.MATCH or self.prompts is None or self.cache_disabled:
            return None
        return HitCount(self.prompts - len(self.misses), self.prompts)


@dataclass(frozen=True)
class Recovered:
    """Every helper block found in one test's output, in order."""

    blocks: tuple[KLBlock, ...] = field(default_factory=tuple)


def recover(output: str, failure: str = "") -> Recovered:
    """Blocks from a test's captured output, completed by its failure text (the assert
    message is raised, not printed, so the hit count and threshold of a red test live there)."""
    blocks: list[KLBlock] = []
    for line in output.splitlines():
        _read_line(line.strip(), blocks)
    _read_failure(failure, blocks)
    return Recovered(tuple(blocks))


def _read_line(line: str, blocks: list[KLBlock]) -> None:
    running = _RUNNING.match(line)
    if running:
        check = CHECK_BY_KIND[running.group("kind")]
        blocks.append(KLBlock(check=check, prompts=int(running.group("total"))))
        return
    if _DISABLED.match(line):
        blocks.append(KLBlock(check=_disabled_check(line), cache_disabled=True))
        return
    if blocks:
        blocks[-1] = _update(blocks[-1], line)
        return
    # A metric line before any "Running ..." header (a helper of another wording, or a
    # traceback in a log) still counts; any other line does not open a block.
    too_few = _TOO_FEW.search(line)
    implicit = KLBlock(check=CHECK_BY_KIND[too_few.group("kind") if too_few else None])
    updated = _update(implicit, line)
    if updated is not implicit:
        blocks.append(updated)


def _disabled_check(line: str) -> str:
    # Older sglang names the helper in this line; newer says only "skipping test", and the
    # caller names the check from the test (`check_from_test_name`).
    kind = re.search(r"_(prefill|decode)_cache_hit", line)
    return CHECK_BY_KIND[kind.group(1)] if kind else UNNAMED_CACHE_CHECK


def check_from_test_name(name: str) -> str | None:
    """The cache check a test's name says it runs (sglang names its tests after the
    helpers: test_input_output_logprobs_match_decode_cache_hit), None if it says none."""
    kind = re.search(r"(prefill|decode)_cache_hit", name)
    return CHECK_BY_KIND[kind.group(1)] if kind else None


def _update(block: KLBlock, line: str) -> KLBlock:
    if miss := _MISS.match(line):
        return replace(block, misses=block.misses | {int(miss.group("index"))})
    if kl_divs := _KL_DIVS.match(line):
        return _with_kl_divs(block, kl_divs.group("body"))
    if avg := _AVG.match(line):
        return _with_number(block, "kl_div", avg.group("value"), "avg_kl_div")
    if threshold := _THRESHOLDS.match(line):
        return _with_number(block, "kl_threshold", threshold.group("value"), "the KL threshold")
    if too_few := _TOO_FEW.search(line):
        return replace(block, too_few=_hit_count(too_few))
    return block


def _with_kl_divs(block: KLBlock, body: str) -> KLBlock:
    if not body.rstrip().endswith("]"):
        return _warn(block, "the kl_divs line is cut off (truncated output); per-sample KL dropped")
    items = [item.strip() for item in body.rstrip()[:-1].split(",") if item.strip()]
    values = [_number(_NUMPY_SCALAR.sub(r"\g<value>", item)) for item in items]
    if any(value is None for value in values):
        return _warn(block, f"kl_divs holds values that are not finite numbers: [{body[:200]}")
    return replace(block, kl_per_sample=tuple(value for value in values if value is not None))


def _with_number(block: KLBlock, name: str, text: str, label: str) -> KLBlock:
    value = _number(_NUMPY_SCALAR.sub(r"\g<value>", text))
    if value is None:
        return _warn(block, f"{label} was printed as {text[:200]!r}, not a finite number")
    if name == "kl_div":
        return replace(block, kl_div=value)
    return replace(block, kl_threshold=value)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _warn(block: KLBlock, warning: str) -> KLBlock:
    return replace(block, warnings=(*block.warnings, warning))


def _hit_count(match: re.Match[str]) -> HitCount:
    hit = match.group("hit") or match.group("hit_old")
    total = match.group("total") or match.group("total_old")
    return HitCount(int(hit), int(total))


def _read_failure(failure: str, blocks: list[KLBlock]) -> None:
    """Apply the assert message to the block that raised it: the last one of its kind."""
    if too_few := _TOO_FEW.search(failure):
        check = CHECK_BY_KIND[too_few.group("kind")]
        index = _last_index(blocks, check)
        blocks[index] = replace(blocks[index], too_few=_hit_count(too_few))
    if over := _numeric_over(failure):
        value, threshold = over
        index = _last_index(blocks, None)
        block = blocks[index]
        blocks[index] = replace(
            block,
            kl_threshold=threshold,
            kl_div=value if block.kl_div is None else block.kl_div,
        )


def _numeric_over(failure: str) -> tuple[float, float] | None:
    # The traceback also quotes the assert's source line ("avg_kl_div={avg_kl_div} > ..."):
    # only the rendered message has numbers.
    for match in _OVER.finditer(failure):
        value, threshold = _number(match.group("value")), _number(match.group("threshold"))
        if value is not None and threshold is not None:
            return value, threshold
    return None


def _last_index(blocks: list[KLBlock], check: str | None) -> int:
    for index in range(len(blocks) - 1, -1, -1):
        if check is None or blocks[index].check == check:
            return index
    blocks.append(KLBlock(check=check or CheckName.MATCH.value))
    return len(blocks) - 1

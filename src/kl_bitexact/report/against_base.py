"""A cache test's numbers beside the base's, as the comment and `report --json` show them
(compare/against_base.py judges them) (pure)."""

from __future__ import annotations

from typing import Any

from kl_bitexact.compare.against_base import BaseDiff, Determinism, Finding, side_by_side
from kl_bitexact.untrusted import escape

HEADLINE = {
    Finding.IDENTICAL: "identical to the base",
    Finding.CACHE_CHANGED: "**the cache path changed** (the no-cache floor did not)",
    Finding.ARITHMETIC_CHANGED: "the arithmetic changed; the cache path within main's history",
    Finding.RATIO_GREW: "**the arithmetic changed and the cache path grew beyond main's history**",
    Finding.FLOOR_RULE_ONLY: "not judged against the base's numbers",
}
DETERMINISM = {
    Determinism.DETERMINISTIC: "deterministic",
    Determinism.NOT_DETERMINISTIC: "not deterministic",
    Determinism.UNMEASURED: "not measured",
}


def block(found: BaseDiff) -> str:
    """The comparison as a small table and the finding in words."""
    how = escape.text(found.determinism_how, 300)
    base_kl, kl = side_by_side(found.base_kl, found.kl)
    base_floor, floor = side_by_side(found.base_floor, found.floor)
    lines = [
        f"\nAgainst the base: {HEADLINE[found.finding]}. Run-to-run: "
        f"{DETERMINISM[found.determinism]} ({how}).\n",
        "\n| | no-cache floor | cache avg KL | ratio |\n|---|---|---|---|\n",
        f"| base | {base_floor} | {base_kl} | {_ratio(found.base_ratio)} |\n",
        f"| this run | {floor} | {kl} | {_ratio(found.ratio)} |\n",
        f"\n{escape.text(found.reason, 600)}.\n",
    ]
    gates = " (gates under gate: noise-floor)" if found.gated else ""
    for said in (found.noisier, found.cannot_tell):
        if said:
            lines.append(f"\n**{escape.text(said, 400)}**{gates}.\n")
    return "".join(lines)


def as_json(found: BaseDiff | None) -> dict[str, Any] | None:
    """The same for machines (`report --json`'s `against_base`)."""
    if found is None:
        return None
    return {
        "finding": found.finding.value,
        "reason": found.reason,
        "gates": found.gates,
        "determinism": found.determinism.value,
        "determinism_how": found.determinism_how,
        "floor": found.floor,
        "kl": found.kl,
        "ratio": found.ratio,
        "base_floor": found.base_floor,
        "base_kl": found.base_kl,
        "base_ratio": found.base_ratio,
        "noisier": found.noisier or None,
        "cannot_tell": found.cannot_tell or None,
        "cache_only_drift": found.cache_only_drift,
    }


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"

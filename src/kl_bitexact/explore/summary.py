"""explore's summary.md from its results value (pure): each finding, and everything the run
could not tell, so that "nothing found" reads as clean only when everything run was judged.

The results value is results.json's (commands/explore.py builds it); this module only
reads it, so the summary says what results.json says and nothing else. Whether the run
reads as clean is `verdict.run_verdict`'s to say, the rule the exit code reads too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kl_bitexact.explore import floor
from kl_bitexact.explore.verdict import Reading, RunVerdict, bit_exact, run_verdict
from kl_bitexact.untrusted import escape

# At most this many characters of why the run stopped (an error may quote the server).
STOPPED_LIMIT = 400

CLEAN = (
    "nothing found: every generated token matched its uncached replay, and every reported "
    "cache hit was one the geometry allows"
)
CLEAN_BY_FLOOR = (
    "nothing found: no judged workload's cached requests drifted past their noise floor, and "
    "every reported cache hit was one the geometry allows"
)
NOT_ALL_JUDGED = (
    "nothing found in what was judged; not everything was (the lines above say what): "
    "this is not a clean result"
)
NOTHING_RAN = "nothing judged: no workload ran (cannot tell whether the server has a cache bug)"


def summary_text(data: Mapping[str, Any]) -> str:
    """summary.md for the results value `data`."""
    lines = [
        "# kl-bitexact explore",
        "",
        f"seed {data['seed']}, budget {data['budget_s']:.0f} s: {data['workloads']} workloads, "
        f"{data['requests']} requests in {data['elapsed_s']:.1f} s "
        f"({data['restored_from_host']} reused a prefix restored from the host tier)",
    ]
    verdict = run_verdict(data)
    if data.get("rule"):
        lines.append(f"rule: {floor.rule_text(bit_exact(data))}")
    if data.get("floor_nearest") is not None:
        lines.append(
            f"{data['floor_judged']} workloads judged by the noise floor; the nearest "
            f"reached {data['floor_nearest']:.3g} of its bound (1 diverges)"
        )
    lines += verdict.said
    if data["stopped"]:
        # An error's words may quote the server's answer: escaped for the job summary.
        lines.append(f"stopped early: {escape.text(data['stopped'], STOPPED_LIMIT)}")
    if data["examples_db"]:
        examples = data["examples_db"]
        lines.append(
            f"example database {examples['path']}: "
            f"{examples['replayed_first']} saved failure(s) replayed first"
        )
    findings = data["findings"]
    for index, finding in enumerate(findings, 1):
        lines += ["", *_finding_lines(index, len(findings), finding)]
    lines += _beyond(data)
    if not findings:
        lines += ["", _nothing_found(verdict, data)]
    return "\n".join(lines + [f"- note: {note}" for note in data["notes"]]) + "\n"


def _nothing_found(verdict: RunVerdict, data: Mapping[str, Any]) -> str:
    """The closing line of a run that found nothing, as its verdict (the exit code's) reads."""
    if verdict.reading is Reading.NOTHING_RAN:
        return NOTHING_RAN
    if verdict.reading is Reading.NOT_ALL_JUDGED:
        return NOT_ALL_JUDGED
    return CLEAN if bit_exact(data) else CLEAN_BY_FLOOR


def _finding_lines(index: int, count: int, finding: Mapping[str, Any]) -> list[str]:
    lines = [
        f"**Found**: {finding['divergence']['located']}",
        f"- finding {index} of {count}: {finding.get('kind', 'a divergence')}",
        f"- shrunk to {finding['requests']} requests in {len(finding['workload'])} steps",
    ]
    if finding["deterministic"] is None:
        lines.append("- not re-run yet: whether it comes back cannot be told")
    else:
        lines.append(f"- found again on {finding['repeats']} re-runs")
    if finding["suite_file"] is None:
        lines.append(f"- not handed back yet: {finding['handback']}")
    else:
        unittest = finding.get("unittest_file")
        files = finding["suite_file"] + (f" and {unittest}" if unittest else "")
        lines.append(f"- handed back as {files}: {finding['handback']}")
    if finding.get("seen_again"):
        lines.append(f"- {finding['seen_again']} more failing workload(s) showed the same bug")
    return lines


def _beyond(data: Mapping[str, Any]) -> list[str]:
    """Where the search ended beside the findings: the cap."""
    cap = data.get("max_findings")
    if cap and len(data["findings"]) >= cap:
        return ["", f"stopped at --max-findings {cap}: further different bugs were not sought"]
    return []

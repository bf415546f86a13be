"""explore's summary.md from its results value (pure): each finding, and everything the run
could not tell, so that "nothing found" reads as clean only when everything run was judged.

The results value is results.json's (commands/explore.py builds it); this module only
reads it, so the summary says what results.json says and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kl_bitexact.explore import floor
from kl_bitexact.untrusted import escape

# At most this many characters of why the run stopped (an error may quote the server).
STOPPED_LIMIT = 400

# Each count of something explore ran but could not judge, and how summary.md says it
# (`{n}`: the count). A nonzero one is always said, and "nothing found" is then never said
# as if everything had been judged.
CANNOT_TELL = {
    "hits_unreported": "{n} request(s)' answers reported no cached_tokens: their cache hits "
    "were not judged against the geometry (nothing found says nothing of them)",
}
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
    if data.get("rule"):
        lines.append(f"rule: {floor.rule_text(_bit_exact(data))}")
    if data.get("floor_nearest") is not None:
        lines.append(
            f"{data['floor_judged']} workloads judged by the noise floor; the nearest "
            f"reached {data['floor_nearest']:.3g} of its bound (1 diverges)"
        )
    lines += unjudged(data)
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
        lines += ["", _nothing_found(data)]
    return "\n".join(lines + [f"- note: {note}" for note in data["notes"]]) + "\n"


def unjudged(data: Mapping[str, Any]) -> list[str]:
    """A line for each nonzero count of something run but not judged."""
    lines = [said.format(n=data[key]) for key, said in CANNOT_TELL.items() if data.get(key)]
    by_floor = floor.not_judged_text(data.get("floor_judged", 0), data.get("not_judged") or {})
    return lines + ([by_floor] if by_floor else [])


def _bit_exact(data: Mapping[str, Any]) -> bool:
    """Whether tokens were judged bit for bit (else by the noise-floor rule)."""
    rule = data.get("rule")
    return not rule or rule.get("name") == "bit-exact"


def _nothing_found(data: Mapping[str, Any]) -> str:
    if not data["workloads"]:
        return NOTHING_RAN
    if data["stopped"] or unjudged(data):
        return NOT_ALL_JUDGED
    return CLEAN if _bit_exact(data) else CLEAN_BY_FLOOR


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

"""What an explore run amounts to, from its results value (pure): something found, nothing
found with everything judged, or "cannot tell" - and why.

The one statement of the rule: summary.md's lines on what was not judged and its closing
line (`summary.py`), and explore's exit code (`commands/explore.py`), all read the
`RunVerdict` made here from the same results value, so the file a person reads and the code
CI gates on cannot disagree. Cannot tell is never a pass: a run that found nothing but left
a number missing (a hit the server did not report, a floor or cached path that compared
nothing, an infinite floor, no workload judged or run, a stop) exits 2, as every command
does when it could not show what it was asked to.

A workload that did not reach the cache path is not such a number: the server reported 0
cached tokens for each of its requests, an observation, so there is nothing of the cache in
it to judge. It is said, with the count judged beside it, and is no cannot-tell by itself
(most random workloads reuse no prefix: a healthy server that is not deterministic would
otherwise never pass); a run in which no workload at all was judged still cannot tell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kl_bitexact.errors import ExitCode
from kl_bitexact.explore import floor

# Each count in the results value of something explore ran but could not judge, and how
# it is said (`{n}`: the count). A nonzero one is always said, and makes the run not clean.
CANNOT_TELL = {
    "hits_unreported": "{n} request(s)' answers reported no cached_tokens: their cache hits "
    "were not judged against the geometry (nothing found says nothing of them)",
}
# The noise-floor rule's reasons not to judge a workload that are an observation, not a
# number missing: said, never cannot tell by themselves. Every other reason is cannot tell.
NOT_REACHED = frozenset({floor.NO_HIT})
NOT_REACHED_TEXT = (
    "{n} of {total} workloads did not reach the cache path: the server reported 0 cached "
    "tokens for each of their requests, so there was no cached path to judge ({judged} judged "
    "by the noise floor)"
)
NOT_JUDGED_TEXT = (
    "{n} of {total} workloads could not be judged by the noise floor (nothing found says "
    "nothing of them): {why}"
)
JUDGED_NONE = "the noise-floor rule judged no workload: nothing was shown"


class Reading(Enum):
    """What the run showed, in the order checked: a finding outweighs everything else."""

    FOUND = "found"
    NOTHING_RAN = "nothing ran"
    NOT_ALL_JUDGED = "not all judged"
    CLEAN = "clean"


_EXIT = {
    Reading.FOUND: ExitCode.GATE_FAILED,
    Reading.NOTHING_RAN: ExitCode.COULD_NOT_RUN,
    Reading.NOT_ALL_JUDGED: ExitCode.COULD_NOT_RUN,
    Reading.CLEAN: ExitCode.GATE_PASSED,
}


@dataclass(frozen=True)
class RunVerdict:
    """The reading; each thing run but not judged (cannot tell), and each thing run that
    did not reach the cache path (said, not cannot tell), in summary.md's words."""

    reading: Reading
    unjudged: tuple[str, ...] = ()
    not_reached: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        """1 found, 0 nothing found and everything judged, 2 cannot tell."""
        return _EXIT[self.reading]

    @property
    def cannot_tell(self) -> bool:
        return self.exit_code is ExitCode.COULD_NOT_RUN

    @property
    def said(self) -> tuple[str, ...]:
        """Every line on what was run but not judged, as summary.md and stderr say them."""
        return self.not_reached + self.unjudged

    @property
    def why(self) -> str:
        """Why it cannot tell, in a line (the exit code's last line on stderr)."""
        if self.reading is Reading.NOTHING_RAN:
            return "no workload ran, so nothing was shown"
        return (
            "nothing found, but not everything run was judged (summary.md says what): "
            "nothing found is a pass only when everything run was judged"
        )


def run_verdict(data: Mapping[str, Any]) -> RunVerdict:
    """The verdict on the results value `data` (results.json's)."""
    unjudged, not_reached = tuple(_unjudged(data)), tuple(_not_reached(data))
    if data["findings"]:
        return RunVerdict(Reading.FOUND, unjudged, not_reached)
    if not data["workloads"]:
        return RunVerdict(Reading.NOTHING_RAN, unjudged, not_reached)
    if data["stopped"] or unjudged:
        return RunVerdict(Reading.NOT_ALL_JUDGED, unjudged, not_reached)
    return RunVerdict(Reading.CLEAN, (), not_reached)


def _unjudged(data: Mapping[str, Any]) -> list[str]:
    """A line for each nonzero count of something run but not judged; under the
    noise-floor rule, one also when it judged none of the workloads run, whatever the
    reasons (an unknown is never a pass, nor is a run of which nothing was judged)."""
    lines = [said.format(n=data[key]) for key, said in CANNOT_TELL.items() if data.get(key)]
    reasons = _reasons(data, cannot_tell=True)
    if reasons:
        why = "; ".join(f"{reason} ({n})" for reason, n in sorted(reasons.items()))
        n = sum(reasons.values())
        lines.append(NOT_JUDGED_TEXT.format(n=n, total=_floor_workloads(data), why=why))
    if not bit_exact(data) and data["workloads"] and not data.get("floor_judged"):
        lines.append(JUDGED_NONE)
    return lines


def _not_reached(data: Mapping[str, Any]) -> list[str]:
    """The line on the workloads that did not reach the cache path, if any."""
    n = sum(_reasons(data, cannot_tell=False).values())
    if not n:
        return []
    judged = data.get("floor_judged", 0)
    return [NOT_REACHED_TEXT.format(n=n, total=_floor_workloads(data), judged=judged)]


def _reasons(data: Mapping[str, Any], *, cannot_tell: bool) -> dict[str, int]:
    """The noise-floor rule's counts of workloads not judged, by reason: those that
    cannot tell, or those that did not reach the cache path."""
    counted = data.get("not_judged") or {}
    return {why: n for why, n in counted.items() if (why not in NOT_REACHED) == cannot_tell}


def _floor_workloads(data: Mapping[str, Any]) -> int:
    """The workloads the noise-floor rule was given: judged, or not and why."""
    judged: int = data.get("floor_judged", 0)
    counted: Mapping[str, int] = data.get("not_judged") or {}
    return judged + sum(counted.values())


def bit_exact(data: Mapping[str, Any]) -> bool:
    """Whether tokens were judged bit for bit (else by the noise-floor rule)."""
    rule = data.get("rule")
    return not rule or rule.get("name") == "bit-exact"

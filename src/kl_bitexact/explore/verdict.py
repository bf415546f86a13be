"""What an explore run amounts to, from its results value (pure): something found, nothing
found with everything judged, or "cannot tell" - and why.

The one statement of the rule: summary.md's closing line (`summary.py`) and explore's exit
code (`commands/explore.py`) both read the `RunVerdict` made here from the same results
value, so the file a person reads and the code CI gates on cannot disagree. Cannot tell is
never a pass: a run that found nothing but did not judge all of what it ran exits 2, as
every command does when it could not show what it was asked to.
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
    """The reading, and each thing run but not judged, in summary.md's words."""

    reading: Reading
    unjudged: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        """1 found, 0 nothing found and everything judged, 2 cannot tell."""
        return _EXIT[self.reading]

    @property
    def cannot_tell(self) -> bool:
        return self.exit_code is ExitCode.COULD_NOT_RUN

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
    unjudged = tuple(_unjudged(data))
    if data["findings"]:
        return RunVerdict(Reading.FOUND, unjudged)
    if not data["workloads"]:
        return RunVerdict(Reading.NOTHING_RAN, unjudged)
    if data["stopped"] or unjudged:
        return RunVerdict(Reading.NOT_ALL_JUDGED, unjudged)
    return RunVerdict(Reading.CLEAN)


def _unjudged(data: Mapping[str, Any]) -> list[str]:
    """A line for each nonzero count of something run but not judged; under the
    noise-floor rule, one also when it judged none of the workloads run and counted no
    reason (an unknown is never a pass)."""
    lines = [said.format(n=data[key]) for key, said in CANNOT_TELL.items() if data.get(key)]
    judged = data.get("floor_judged", 0)
    by_floor = floor.not_judged_text(judged, data.get("not_judged") or {})
    if by_floor:
        lines.append(by_floor)
    elif not bit_exact(data) and data["workloads"] and not judged:
        lines.append(JUDGED_NONE)
    return lines


def bit_exact(data: Mapping[str, Any]) -> bool:
    """Whether tokens were judged bit for bit (else by the noise-floor rule)."""
    rule = data.get("rule")
    return not rule or rule.get("name") == "bit-exact"

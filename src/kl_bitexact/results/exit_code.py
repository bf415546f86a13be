"""The exit code a run's own results call for (`run`, `pytest`, `import-junit`)."""

from __future__ import annotations

from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import Results, Status


def exit_code(final: Results) -> ExitCode:
    """2 when no test reached a verdict (passed, failed or flaky); otherwise 1 for any
    failed, flaky or not_run test (a check that measured nothing is not a pass, nor are
    repeats that disagree: `report --fail-on` decides whether that gates a merge), 2 if
    any errored; else 0."""
    statuses = [test.status for _, test in final.all_tests()]
    if not any(s in (Status.PASSED, Status.FAILED, Status.FLAKY) for s in statuses):
        return ExitCode.COULD_NOT_RUN
    if any(s in (Status.FAILED, Status.NOT_RUN, Status.FLAKY) for s in statuses):
        return ExitCode.GATE_FAILED
    if Status.ERROR in statuses:
        return ExitCode.COULD_NOT_RUN
    return ExitCode.GATE_PASSED

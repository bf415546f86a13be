"""The exit code a run's own results call for (`run`, `pytest`, `import-junit`)."""

from __future__ import annotations

from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import Results, Status


def exit_code(final: Results) -> ExitCode:
    """2 when no test reached a verdict (passed or failed); otherwise 1 for any failed or
    not_run test (a check that measured nothing is not a pass), 2 if any errored; else 0."""
    statuses = [test.status for _, test in final.all_tests()]
    if not any(s in (Status.PASSED, Status.FAILED) for s in statuses):
        return ExitCode.COULD_NOT_RUN
    if any(s in (Status.FAILED, Status.NOT_RUN) for s in statuses):
        return ExitCode.GATE_FAILED
    if Status.ERROR in statuses:
        return ExitCode.COULD_NOT_RUN
    return ExitCode.GATE_PASSED

"""The exit code a run's own results call for (`run`, `pytest`, `import-junit`)."""

from __future__ import annotations

from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import Results, Status


def exit_code(final: Results) -> ExitCode:
    """2 (could not run) when no test reached a verdict (passed, failed or flaky), or when
    any test could not be measured (`error`: an adapter or engine error, a server that
    died, a check that crashed): a run with a hole in it is not a clean red run, whatever
    its other tests say, and its results.json still holds every verdict reached. Else 1
    for any failed, flaky or not_run test (a check that measured nothing is not a pass, nor
    are repeats that disagree: `report --fail-on` decides whether that gates a merge); else 0."""
    statuses = [test.status for _, test in final.all_tests()]
    if not any(s in (Status.PASSED, Status.FAILED, Status.FLAKY) for s in statuses):
        return ExitCode.COULD_NOT_RUN
    if Status.ERROR in statuses:
        return ExitCode.COULD_NOT_RUN
    if any(s in (Status.FAILED, Status.NOT_RUN, Status.FLAKY) for s in statuses):
        return ExitCode.GATE_FAILED
    return ExitCode.GATE_PASSED

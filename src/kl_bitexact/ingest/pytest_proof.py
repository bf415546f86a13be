"""The proof run of registered Python test files (`kl-bitexact pytest --prove-base`), pure.

The head's test files run with the base revision's engine; pytest is told the units to run
(registry/pychanges.py: `file.py::Class::test`, `file.py::Class`, `file.py`), and every test
it ran names its unit. Its results are cut to those tests, and each unit that ran nothing
becomes one `error` entry saying why (the file does not import on the base revision, pytest
died, it could not be copied there, or nothing was collected under it), shown as "could not
prove" for each head test under it (compare/proof.py), never gating.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgspec import structs

from kl_bitexact.ingest import properties as prop
from kl_bitexact.ingest.junit import JUnitCase, Outcome
from kl_bitexact.ingest.junit_results import node_id
from kl_bitexact.ingest.nodeids import UNIT_CHECK, same_file
from kl_bitexact.results.io import join_by_name
from kl_bitexact.results.model import Results, ServerInfo, Status, SuiteResult, TestResult

# pytest's JUnit message for a module it could not import.
_COLLECTION_FAILURE = "collection failure"
MAX_REASON = 500


def proof_results(
    imported: Results,
    cases: Sequence[JUnitCase],
    units: Sequence[str],
    refused: Mapping[str, str],
    failure: str = "",
) -> Results:
    """`imported` (pytest's results) cut to the tests run for `units`, plus an error entry
    for each unit that ran nothing. `refused`: file -> why it was not run at all; `failure`:
    why pytest itself did not finish (empty when it did)."""
    ran_for = {node_id(case): case.property(prop.PROVE_UNIT) for case in cases}
    suites = []
    for suite in imported.suites:
        tests = tuple(test for test in suite.tests if ran_for.get(test.id) in units)
        if tests:
            suites.append(structs.replace(suite, tests=tests))
    ran = {ran_for[test.id] for suite in suites for test in suite.tests}
    reasons = _collection_failures(cases)
    for unit in units:
        if unit in ran:
            continue
        why = _why(unit, refused, reasons, failure)
        entry = TestResult(id=unit, check=UNIT_CHECK, status=Status.ERROR, message=why)
        # the file as the suite, as pytest's own results name it
        suites.append(SuiteResult(unit.partition("::")[0], ServerInfo(engine="none"), (entry,)))
    suites = list(join_by_name(suites))
    return structs.replace(imported, suites=tuple(suites))


def _why(unit: str, refused: Mapping[str, str], imports: Mapping[str, str], failure: str) -> str:
    file = unit.partition("::")[0]
    if file in refused:
        return f"{file}: {refused[file]}"
    for node_file, reason in imports.items():
        if same_file(node_file, file):
            return f"{file} does not import on the base revision: {reason}"
    if failure:
        return failure
    return f"the base revision's pytest collected no test under {unit}"


def _collection_failures(cases: Sequence[JUnitCase]) -> dict[str, str]:
    """file -> the error that kept pytest from importing it (its last `E   ` line)."""
    found = {}
    for case in cases:
        if case.outcome is Outcome.ERROR and case.message == _COLLECTION_FAILURE and case.file:
            found[case.file] = _last_error_line(case.details)
    return found


def _last_error_line(details: str) -> str:
    lines = [line[1:].strip() for line in details.splitlines() if line.startswith("E ")]
    text = lines[-1] if lines else (details.strip().splitlines() or ["(no details)"])[-1]
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"

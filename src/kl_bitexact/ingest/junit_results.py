"""JUnit test cases (+ what they printed, + what the plugin recorded) -> Results (pure).

Status mapping (docs/pytest.md explains it to users):
- passed, failed, error, skipped map to themselves;
- xfail (expected failure) -> skipped, message "xfail: REASON": it neither passed nor
  regressed; a test that must stay red until a PR merges belongs under `blocked_by`;
- xpass (marked xfail but passed) -> passed with a warning; strict xpass is a pytest failure;
- a test whose sglang helper found the radix cache disabled -> not_run (sglang passes it
  vacuously), and a check the plugin recorded as not_run stays not_run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msgspec import structs

from kl_bitexact.errors import ConfigError
from kl_bitexact.ingest import properties as prop
from kl_bitexact.ingest.junit import JUnitCase, Outcome
from kl_bitexact.ingest.sglang_output import (
    UNNAMED_CACHE_CHECK,
    KLBlock,
    check_from_test_name,
    recover,
)
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.results import verdict
from kl_bitexact.results.model import (
    CacheHits,
    Results,
    RunInfo,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)
from kl_bitexact.untrusted import jsonfile

# sglang's kl_test_utils asserts `kept > 0.5 * total`; its output never prints the ratio.
SGLANG_MIN_CACHE_HIT_RATIO = 0.5
UNKNOWN_ENGINE = "unknown"
PLAIN_CHECK = "pytest"  # a test that printed no KL lines and recorded nothing
# A KL check whose logprobs the observer could not pair (docs/pytest.md says which helper
# calls it reads): its exact count is unknown, and says why.
NO_EXACT_SIGNAL = "no exact signal observed"
NOTHING_PAIRED = (
    "no decode was replayed through `requests` (the observer pairs a /generate answer with "
    "a later request for its prompt + output_ids that scores those positions)"
)
NOT_OBSERVED = "the run was not observed (kl-bitexact pytest observes the server's answers)"
MAX_MESSAGE = 4000

_STATUS = {
    Outcome.PASSED: Status.PASSED,
    Outcome.FAILED: Status.FAILED,
    Outcome.ERROR: Status.ERROR,
    Outcome.SKIPPED: Status.SKIPPED,
    Outcome.XFAIL: Status.SKIPPED,
}


@dataclass(frozen=True)
class Options:
    min_cache_hit_ratio: float = SGLANG_MIN_CACHE_HIT_RATIO
    # Extra output per node id (from `import-junit --log`), used for cases whose JUnit
    # entry captured no KL lines.
    log_output: Mapping[str, str] | None = None
    # The command that runs a test again once its node id is appended (the caller knows
    # how the tests ran); recorded for a suite whose every case the plugin says was
    # addressed from pytest's rootdir (`rerun_known`).
    rerun: tuple[str, ...] | None = None


def to_results(cases: Sequence[JUnitCase], run: RunInfo, options: Options) -> Results:
    """One suite per registered suite name (else per test file), tests in file order.

    A node id reported more than once (a rerun plugin, XML files concatenated) keeps every
    report apart: the first under its id, the next as `ID (report 2)`, ... each with a
    warning. The last report used to win, so a failure followed by a pass imported as a
    pass (issue 14, case 9); now the red report gates whatever came after it.
    """
    converted = [(case, to_test(case, options)) for case in cases]
    suites: dict[str, tuple[ServerInfo, list[TestResult]]] = {}
    addressed: dict[str, bool] = {}
    for case, test in _kept_apart(converted):
        name = case.property(prop.SUITE) or test.id.split("::", 1)[0]
        _, tests = suites.setdefault(name, (_server(case), []))
        tests.append(test)
        addressed[name] = addressed.get(name, True) and rerun_known(case)
    return Results(
        run=run,
        suites=tuple(
            SuiteResult(
                name=name,
                server=server,
                tests=tuple(tests),
                rerun=options.rerun if addressed[name] else None,
            )
            for name, (server, tests) in suites.items()
        ),
    )


def rerun_known(case: JUnitCase) -> bool:
    """Its node id runs it again as an argument to pytest: the plugin recorded the id, and
    pytest started in its rootdir. A rebuilt id (no plugin: from classname and file) may not
    be one pytest accepts, and names no way it was run."""
    return bool(case.property(prop.NODEID)) and case.property(prop.ROOTDIR) == "."


def _kept_apart(
    converted: Sequence[tuple[JUnitCase, TestResult]],
) -> list[tuple[JUnitCase, TestResult]]:
    """Each report with an id of its own (results.json ids are unique)."""
    reports = Counter(test.id for _, test in converted)
    taken = set(reports)
    seen: Counter[str] = Counter()
    kept = []
    for case, test in converted:
        times = reports[test.id]
        if times > 1:
            seen[test.id] += 1
            warning = f"reported {times} times: each report kept as its own test"
            test = structs.replace(
                test, id=_own_id(test.id, seen[test.id], taken), warnings=(*test.warnings, warning)
            )
        kept.append((case, test))
    return kept


def _own_id(node: str, report: int, taken: set[str]) -> str:
    """`node` for its first report, `node (report N)` for the Nth, never an id in use."""
    if report == 1:
        return node
    candidate, extra = f"{node} (report {report})", 1
    while candidate in taken:
        extra += 1
        candidate = f"{node} (report {report}.{extra})"
    taken.add(candidate)
    return candidate


def to_test(case: JUnitCase, options: Options) -> TestResult:
    nodeid = node_id(case)
    recorded = _recorded(case, nodeid)
    base = recorded if recorded is not None else _from_output(case, nodeid, options)
    base = _with_observed(case, nodeid, base)
    base = _with_reach(case, nodeid, base)
    status = _combined_status(_STATUS[case.outcome], base.status)
    # A recorded check that did not pass explains itself better than pytest's wrapper.
    own_words = status is Status.PASSED or (
        recorded is not None and recorded.status is not Status.PASSED
    )
    test = structs.replace(
        base,
        id=nodeid,
        status=status,
        duration_s=case.time_s,
        message=base.message if own_words else _message(case, base),
        blocked_by=_blocked_by(case, base),
        warnings=(*base.warnings, *_outcome_warnings(case)),
    )
    # A fact it states that did not hold, or a function it names that never ran: not
    # exercised, whatever pytest said (results.verdict, the one rule).
    return verdict.exercised(_with_facts(case, nodeid, test))


def _with_facts(case: JUnitCase, nodeid: str, test: TestResult) -> TestResult:
    """The facts the plugin read from the test's server (`kl_expect`), validated."""
    return _with_recorded(case, nodeid, test, prop.FACTS, "facts")


def _with_recorded(
    case: JUnitCase, nodeid: str, test: TestResult, name: str, field: str
) -> TestResult:
    """`test` with one field the plugin recorded as a JSON property, decoded by the same
    strict rules as that field in results.json (absent: `test` as it is)."""
    text = case.property(name)
    if text is None:
        return test
    entry = {
        "id": nodeid,
        "check": test.check,
        "status": "passed",
        field: _parse_json(text, nodeid, name),
    }
    return structs.replace(test, **{field: getattr(_decoded(entry, nodeid, name), field)})


def node_id(case: JUnitCase) -> str:
    """pytest's node id: from the plugin's property, else rebuilt from classname/file."""
    recorded = case.property(prop.NODEID)
    if recorded:
        return recorded
    parts = case.classname.split(".") if case.classname else []
    if case.file and case.file.endswith(".py"):
        module = case.file[: -len(".py")].replace("/", ".").split(".")
        if parts[: len(module)] == module:
            return "::".join([case.file, *parts[len(module) :], case.name])
    # No file attribute (xunit2): classes are the trailing capitalised parts.
    split = len(parts)
    while split > 1 and parts[split - 1][:1].isupper():
        split -= 1
    path = "/".join(parts[:split]) + ".py" if split else ""
    return "::".join(item for item in [path, *parts[split:], case.name] if item)


def _recorded(case: JUnitCase, nodeid: str) -> TestResult | None:
    text = case.property(prop.RESULT)
    if text is None:
        return None
    test = _parse_json(text, nodeid, prop.RESULT)
    if isinstance(test, dict):
        test = {**test, "id": nodeid}
    return _decoded(test, nodeid, prop.RESULT)


def _with_observed(case: JUnitCase, nodeid: str, base: TestResult) -> TestResult:
    """The exact counts the plugin's observer paired from the server's answers, beside the
    file's own numbers (its KL and verdict are untouched); a check that recorded its own
    exact counts (kl_check) keeps them."""
    text = case.property(prop.OBSERVED)
    if base.exact is not None:
        return base
    if text is None:
        return _no_exact_signal(base, NOT_OBSERVED)
    observed = _parse_json(text, nodeid, prop.OBSERVED)
    if not isinstance(observed, dict):
        raise ConfigError(f"{nodeid}: JUnit property {prop.OBSERVED} is not an object")
    if observed.get("exact") is None:
        generated = observed.get("generated")
        read = f"{generated} /generate answer(s) read" if isinstance(generated, int) else ""
        base = structs.replace(base, warnings=(*base.warnings, *_strings(observed.get("warnings"))))
        return _no_exact_signal(base, f"{NOTHING_PAIRED} ({read})" if read else NOTHING_PAIRED)
    test = {
        "id": nodeid,
        "check": base.check,
        "status": "passed",
        "exact": observed.get("exact"),
        "first_divergence": observed.get("first_divergence", []),
        "warnings": observed.get("warnings", []),
    }
    found = _decoded(test, nodeid, prop.OBSERVED)
    return structs.replace(
        base,
        exact=found.exact,
        first_divergence=found.first_divergence,
        warnings=(*base.warnings, *found.warnings),
    )


def _no_exact_signal(test: TestResult, why: str) -> TestResult:
    """A KL check without an exact count says so (never a silent null); a test that is
    not a KL check has none to miss."""
    if test.check == PLAIN_CHECK:
        return test
    return structs.replace(test, warnings=(*test.warnings, f"{NO_EXACT_SIGNAL}: {why}"))


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _with_reach(case: JUnitCase, nodeid: str, base: TestResult) -> TestResult:
    """Which of the functions the test names ran (the plugin's `reach` property)."""
    return _with_recorded(case, nodeid, base, prop.REACH, "reach")


def _decoded(test: Any, nodeid: str, name: str) -> TestResult:
    """One results.json test entry from a JUnit property, validated against the schema."""
    document = {
        "schema_version": results.SCHEMA_VERSION,
        "tool": {"name": results.TOOL_NAME, "version": "recorded"},
        "run": {},
        "suites": [{"name": "recorded", "server": {"engine": UNKNOWN_ENGINE}, "tests": [test]}],
    }
    decoded = results_io.from_json(document, source=f"{nodeid} property {name}")
    return decoded.suites[0].tests[0]


def _parse_json(text: str, nodeid: str, name: str) -> Any:
    try:
        return jsonfile.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{nodeid}: JUnit property {name} is not JSON ({error.msg} at column {error.colno})",
            hint="record metrics through the kl_bitexact pytest plugin, not by hand",
        ) from None
    except ValueError as error:  # nested too deep, an integer too long
        raise ConfigError(
            f"{nodeid}: JUnit property {name}: {error}",
            hint="record metrics through the kl_bitexact pytest plugin, not by hand",
        ) from None


def _from_output(case: JUnitCase, nodeid: str, options: Options) -> TestResult:
    output = case.system_out + "\n" + case.system_err
    blocks = recover(output, case.message + "\n" + case.details).blocks
    if not blocks and options.log_output and nodeid in options.log_output:
        blocks = recover(options.log_output[nodeid], case.message + "\n" + case.details).blocks
    if not blocks:
        return TestResult(id=nodeid, check=PLAIN_CHECK, status=Status.PASSED)
    return _from_blocks(nodeid, blocks, case.outcome, options.min_cache_hit_ratio)


def _from_blocks(
    nodeid: str, blocks: Sequence[KLBlock], outcome: Outcome, min_ratio: float
) -> TestResult:
    block, warnings = _chosen(blocks, outcome)
    hits = block.cache_hits()
    status = Status.NOT_RUN if block.cache_disabled else Status.PASSED
    message = (
        "the radix cache is disabled: sglang's helper returned without measuring"
        if block.cache_disabled
        else ""
    )
    check = block.check
    if check == UNNAMED_CACHE_CHECK:
        # Only the prefill and decode helpers print the skip line; the test's name says which.
        check = check_from_test_name(nodeid.rsplit("::", 1)[-1]) or PLAIN_CHECK
    return TestResult(
        id=nodeid,
        check=check,
        status=status,
        kl_div=block.kl_div,
        kl_threshold=block.kl_threshold,
        kl_per_sample=block.kl_per_sample,
        cache_hits=CacheHits(hits.hit, hits.total, min_ratio) if hits else None,
        message=message,
        warnings=(*warnings, *block.warnings),
    )


def _chosen(blocks: Sequence[KLBlock], outcome: Outcome) -> tuple[KLBlock, tuple[str, ...]]:
    """One block per test: the one that failed (an assert ends the test, so the last one),
    else the one with the highest KL."""
    if len(blocks) == 1:
        return blocks[0], ()
    if outcome in (Outcome.FAILED, Outcome.ERROR):
        return blocks[-1], (f"{len(blocks)} KL helpers ran in this test; shown: the last",)
    worst = max(blocks, key=lambda block: -1.0 if block.kl_div is None else block.kl_div)
    disabled = [block for block in blocks if block.cache_disabled]
    chosen = disabled[0] if disabled else worst
    return chosen, (f"{len(blocks)} KL helpers ran in this test; shown: the weakest",)


def _combined_status(pytest_status: Status, measured: Status) -> Status:
    """A measurement that could not run says so; else pytest's red wins; a measurement
    that ran nothing or failed is never a pass."""
    if measured is Status.ERROR:
        return measured
    if pytest_status in (Status.FAILED, Status.ERROR):
        return pytest_status
    if measured in (Status.NOT_RUN, Status.FAILED, Status.ERROR):
        return measured
    return pytest_status


def _message(case: JUnitCase, base: TestResult) -> str:
    if case.outcome is Outcome.XFAIL:
        reason = case.property(prop.XFAIL_REASON) or case.message or "expected failure"
        text = f"xfail: {reason}"
    else:
        text = case.message or base.message
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _blocked_by(case: JUnitCase, base: TestResult) -> tuple[str, ...]:
    text = case.property(prop.BLOCKED_BY)
    marked = _parse_json(text, node_id(case), prop.BLOCKED_BY) if text else []
    if not isinstance(marked, list) or not all(isinstance(item, str) for item in marked):
        raise ConfigError(f"{node_id(case)}: JUnit property {prop.BLOCKED_BY} is not a list")
    return tuple(dict.fromkeys([*base.blocked_by, *marked]))


def _outcome_warnings(case: JUnitCase) -> tuple[str, ...]:
    if case.property(prop.OUTCOME) == "xpass":
        reason = case.property(prop.XFAIL_REASON) or "no reason given"
        return (f"xpass: marked xfail ({reason}) but passed; remove the marker",)
    return ()


def _server(case: JUnitCase) -> ServerInfo:
    text = case.property(prop.SERVER)
    if not text:
        return ServerInfo(engine=UNKNOWN_ENGINE)
    info = _parse_json(text, node_id(case), prop.SERVER)
    if not isinstance(info, dict) or not isinstance(info.get("engine"), str):
        raise ConfigError(f"{node_id(case)}: JUnit property {prop.SERVER} has no engine")
    args = info.get("args", [])
    launch_s = info.get("launch_s")
    return ServerInfo(
        engine=info["engine"],
        args=tuple(str(arg) for arg in args) if isinstance(args, list) else (),
        launch_s=float(launch_s) if isinstance(launch_s, (int, float)) else None,
    )

"""The pytest plugin (entry point `pytest11`): markers, and what each test records.

Loaded in every pytest session of an environment where kl-bitexact is installed, so it
stays cheap and silent: it registers markers and adds a few JUnit properties
(`pytest_properties`) that `kl-bitexact pytest` / `import-junit` read back; what a marker
or fixture needs is imported when one is used.

- `@pytest.mark.blocked_by("owner/repo#N", ...)`: the test is expected red until these merge.
- `@pytest.mark.register_ci(backend, est_time, suite=..., ...)`: sglang's registration
  fields (`register_cuda_ci(...)`) as a marker; the suite name groups results, and
  `disabled="reason"` skips the test.
- `@pytest.mark.kl_suite(spec)` and the fixtures `kl_server`, `kl_check`, `kl_record`
  (`pytest_fixtures`): servers and checks from a suite-style spec.
- `@pytest.mark.kl_expect(fact=value, ...)`: the server facts the test depends on, read
  from its server after the test body (facts.py).
- `--kl-observe` (set by `kl-bitexact pytest`): the logprobs each test's server answers,
  decode vs replay, counted bit for bit (observe.py); `--kl-exact` fails a test where any
  of them differs.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.ingest import properties as prop
from kl_bitexact.pytest_plugin.fixtures import kl_check, kl_module_server, kl_record, kl_server

if TYPE_CHECKING:
    from kl_bitexact.pytest_plugin.observe import RequestsTap
    from kl_bitexact.pytest_plugin.reach import Tracker
    from kl_bitexact.pytest_plugin.registration import RegisterMarker

# Fixtures are found by name in the plugin module.
__all__ = ["kl_check", "kl_module_server", "kl_record", "kl_server"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kl-base-url",
        metavar="URL",
        help="kl_server: use the server running at URL instead of launching the kl_suite's",
    )
    parser.addoption(
        OWN_TESTS_ONLY,
        action="store_true",
        help="collect what `python3 file.py` runs: a test_* function imported from another "
        "module (sglang's test_..._helper) is not a test of the file (set by kl-bitexact pytest)",
    )
    parser.addoption(
        OBSERVE,
        action="store_true",
        help="pair the logprobs each test's server answers through `requests` (a decode and "
        "its replay, as sglang's KL helpers pair them) and record how many differ in any bit "
        "(set by kl-bitexact pytest)",
    )
    parser.addoption(
        EXACT,
        action="store_true",
        help="with the observer: a test where any paired logprob differs fails, whatever its "
        "own threshold said (implies --kl-observe; set by kl-bitexact pytest --exact)",
    )
    parser.addoption(
        PLAN,
        metavar="FILE",
        help="write the collected tests (after deselection) to FILE as JSON before the first "
        "test runs, so a session stopped part-way shows what did not run (set by "
        "kl-bitexact pytest)",
    )
    parser.addoption(
        PROVE_UNIT,
        action="append",
        default=[],
        metavar="UNIT",
        help="run only the tests under UNIT (FILE, FILE::Class, FILE::Class::test or "
        "FILE::test; FILE relative to the invocation directory); repeatable (set by "
        "kl-bitexact pytest --prove-base)",
    )


OWN_TESTS_ONLY = "--kl-own-tests-only"
OBSERVE = "--kl-observe"
EXACT = "--kl-exact"
_TAP: pytest.StashKey[RequestsTap] = pytest.StashKey()
_REACH: pytest.StashKey[Tracker] = pytest.StashKey()
# Set by `kl-bitexact pytest` (reach/probe_dir.py): the session's reach probe directory.
_REACH_DIR = "KL_BITEXACT_REACH_DIR"
PROVE_UNIT = "--kl-prove-unit"
PLAN = "--kl-plan"


def pytest_pycollect_makeitem(
    collector: pytest.Collector, name: str, obj: object
) -> list[pytest.Item] | None:
    """What `python3 file.py` runs, nothing else (`--kl-own-tests-only`). A file whose main
    block calls `unittest.main()` (sglang's way) runs its `unittest.TestCase` classes only:
    module-level functions - its own helpers named `test_prefill_cache_hit(base_url, ...)`
    as much as imported ones - and plain classes are never tests there. In any other file,
    a test_* function imported from another module (sglang's test_..._helper) is not a
    test of the file either."""
    if not isinstance(collector, pytest.Module) or not _option(collector.config, OWN_TESTS_ONLY):
        return None
    # Imported here: the plugin loads in every pytest session and stays light.
    from kl_bitexact.pytest_plugin.unittest_main import runs_unittest_main

    if runs_unittest_main(collector.path):
        import unittest  # the file's main block calls it: already loaded

        is_case = inspect.isclass(obj) and issubclass(obj, unittest.TestCase)
        return None if is_case else []
    if inspect.isfunction(obj) and obj.__module__ != collector.module.__name__:
        return []
    return None


def _option(config: pytest.Config, name: str) -> Any:
    return config.getoption(name.removeprefix("--").replace("-", "_"))


def pytest_configure(config: pytest.Config) -> None:
    if _option(config, OBSERVE) or _option(config, EXACT):
        from kl_bitexact.pytest_plugin.observe import RequestsTap

        tap = RequestsTap()
        tap.install()
        config.stash[_TAP] = tap
    if os.environ.get(_REACH_DIR):
        from kl_bitexact.pytest_plugin.reach import tracker

        found = tracker()
        if found is not None:
            config.stash[_REACH] = found
    config.addinivalue_line(
        "markers",
        "blocked_by(*refs): expected red until these pull requests merge "
        "(owner/repo#N, #N with GITHUB_REPOSITORY set, or a pull/issue URL)",
    )
    config.addinivalue_line(
        "markers",
        "register_ci(backend, est_time, suite=None, nightly=False, disabled=None, *, "
        "stage=None, runner_config=None): the CI registration of a test (sglang's "
        "register_<backend>_ci fields)",
    )
    config.addinivalue_line(
        "markers",
        "kl_expect(**facts): the server facts the test depends on (fact=value, a dotted "
        "name through **{...}), checked against what its server reports; one that does not "
        "hold makes the test not_exercised (kl-bitexact pytest)",
    )
    config.addinivalue_line(
        "markers",
        "kl_suite(spec, name=None): the suite-style spec (YAML path relative to the test file, "
        "or a mapping) whose server the kl_server fixture launches",
    )
    config.addinivalue_line(
        "markers",
        "reach(*functions): the functions this test exists to exercise (module:qualname); "
        "kl-bitexact pytest records which of them ran (docs/reach.md)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    units = config.getoption(PROVE_UNIT.removeprefix("--").replace("-", "_"))
    if units:
        _keep_units(config, items, units)
    rootdir = os.path.relpath(config.rootpath, config.invocation_params.dir)
    for item in items:
        item.user_properties.append((prop.NODEID, item.nodeid))
        item.user_properties.append((prop.ROOTDIR, rootdir))
        blocked = _blocked_by(item)
        if blocked:
            item.user_properties.append((prop.BLOCKED_BY, json.dumps(blocked)))
        registration = _registration(item)
        if registration is not None:
            item.user_properties.append((prop.SUITE, registration.suite_name))
            if registration.disabled:
                item.add_marker(pytest.mark.skip(reason=f"disabled: {registration.disabled}"))
    reach = config.stash.get(_REACH, None)
    if reach is not None:
        reach.collected(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """`--kl-plan FILE`: every test about to run - suite (as the importer groups them),
    node id - written atomically before the first one starts."""
    path = _option(session.config, PLAN)
    if not path:
        return
    # A test's check before it ran: what the importer calls a test whose output named none.
    from kl_bitexact.ingest.junit_results import PLAIN_CHECK

    plan = [
        {"suite": _suite_name(item), "id": item.nodeid, "check": PLAIN_CHECK}
        for item in session.items
    ]
    scratch = f"{path}.{os.getpid()}.tmp"
    with open(scratch, "w", encoding="utf-8") as handle:
        json.dump(plan, handle)
    os.replace(scratch, path)


def _suite_name(item: pytest.Item) -> str:
    registration = _registration(item)
    return registration.suite_name if registration else item.nodeid.split("::", 1)[0]


def _keep_units(config: pytest.Config, items: list[pytest.Item], units: list[str]) -> None:
    """Deselect every test outside the units; name each kept test's unit (a JUnit
    property), so the proof run can tell a unit that ran nothing from one that ran."""
    invoked = config.invocation_params.dir
    wanted = []
    for unit in units:
        file, _, prefix = unit.partition("::")
        wanted.append((os.path.realpath(invoked / file), prefix, unit))
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        found = _unit_of(item, wanted)
        if found is None:
            dropped.append(item)
            continue
        item.user_properties.append((prop.PROVE_UNIT, found))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _unit_of(item: pytest.Item, wanted: list[tuple[str, str, str]]) -> str | None:
    """The first unit holding the item: its file (symlinks resolved), then its node id
    below the file (`Class`, `Class::test`, `test`, `test[param]`)."""
    path = os.path.realpath(item.path)
    rest = item.nodeid.partition("::")[2]
    for file, prefix, unit in wanted:
        below = not prefix or rest == prefix or rest.startswith((f"{prefix}::", f"{prefix}["))
        if path == file and below:
            return unit
    return None


def _blocked_by(item: pytest.Item) -> list[str]:
    default_repo = os.environ.get("GITHUB_REPOSITORY")
    refs: list[str] = []
    for marker in item.iter_markers("blocked_by"):
        if not marker.args or marker.kwargs:
            raise pytest.UsageError(
                f"{item.nodeid}: write @pytest.mark.blocked_by('owner/repo#N', ...)"
            )
        for text in marker.args:
            refs.append(_parse(item, text, default_repo))
    return list(dict.fromkeys(refs))


def _parse(item: pytest.Item, text: Any, default_repo: str | None) -> str:
    from kl_bitexact.suite.references import parse_ref  # only for tests with the marker

    written = str(text).strip()
    try:
        # The placeholder only lets `#N` pass the syntax check when no repository is
        # known here; `#N` is then kept as written, for the resolver to complete.
        ref = parse_ref(written, default_repo or "owner/repo")
    except ConfigError as error:
        raise pytest.UsageError(f"{item.nodeid}: {error.message} ({error.hint})") from None
    return str(ref) if default_repo or not written.startswith("#") else written


def _registration(item: pytest.Item) -> RegisterMarker | None:
    marker = item.get_closest_marker("register_ci")
    if marker is None:
        return None
    from kl_bitexact.pytest_plugin.registration import from_marker  # only with the marker

    try:
        return from_marker(marker.args, marker.kwargs)
    except ConfigError as error:
        raise pytest.UsageError(f"{item.nodeid}: {error.message}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    reach = item.config.stash.get(_REACH, None)
    if reach is not None:
        reach.begin(item, "setup")
    tap = item.config.stash.get(_TAP, None)
    if tap is not None:
        from kl_bitexact.pytest_plugin.observe import TestObservation

        # A class's setUpClass runs in its first test's setup: its answers count there.
        tap.current = TestObservation()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    reach = item.config.stash.get(_REACH, None)
    if reach is not None:
        reach.begin(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    tap = item.config.stash.get(_TAP, None)
    observed = tap.current if tap is not None else None
    exact = _option(item.config, EXACT)
    if call.when == "call" and item.get_closest_marker("kl_expect") is not None:
        _record_facts(item, observed)  # after the body, while the class's server is up
    if observed is not None and call.when == "teardown":
        record = observed.record(enforced=exact)
        item.user_properties.append((prop.OBSERVED, json.dumps(record)))
    reach = item.config.stash.get(_REACH, None)
    if reach is not None and call.when == "teardown":
        reach.record(item)
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if observed is not None and exact and call.when == "call" and report.passed:
        _fail_on_difference(report, observed)
    reason = getattr(report, "wasxfail", None)
    if reason is None or report.when != "call":
        return
    item.user_properties.append((prop.XFAIL_REASON, reason.removeprefix("reason: ")))
    if report.passed:
        # JUnit writes a non-strict xpass as a plain pass; say what it was.
        item.user_properties.append((prop.OUTCOME, "xpass"))


def _record_facts(item: pytest.Item, observed: Any) -> None:
    from kl_bitexact.pytest_plugin import facts  # only for tests with the marker

    value = facts.record(item, observed)
    if value is not None:
        item.user_properties.append((prop.FACTS, value))


def _fail_on_difference(report: pytest.TestReport, observed: Any) -> None:
    """`--kl-exact`: a passing test whose server answered differing logprobs fails."""
    match = observed.exact()
    if match is None or not match.mismatched or hasattr(report, "wasxfail"):
        return
    where = ""
    divergences = observed.divergences()
    if divergences:
        first = divergences[0]
        where = f"; first: sample {first.sample}, token {first.token_index} ({first.hint})"
    report.outcome = "failed"
    report.longrepr = (
        f"kl-bitexact --exact: {match.mismatched}/{match.tokens} logprobs differ between "
        f"decode and replay, though the test's own check passed{where}"
    )

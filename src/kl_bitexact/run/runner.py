"""Running suites: one launch per distinct server, every check, a result for every test.

One bad case never aborts the run: a server that does not start turns its suite's tests
into `error`; a server that dies mid-run turns the running test into `error` with the
log's tail, the rest of that suite too, and the next suite starts a fresh server. After
every test the caller's `save` receives the results so far (run writes them atomically,
so a kill -9 keeps every finished test). The plan (every test the run means to execute)
is saved before the first test; whatever ends the run early (a signal, a crash) saves the
tests left without a verdict as `error` saying why, so no reader can take a half run for
a whole one. The checks of a suite share cold phases (`checks/phases.py`); suites of one
name (from several files) are joined in the results.

`repeat` > 1 runs each test that many times and folds the attempts into one result
(`checks/repeats.py`: flaky when they disagree): back to back on the same launch, or with
`relaunch`, one whole pass of the plan per launch, folded after each pass.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from msgspec import structs

from kl_bitexact.errors import EngineError, FatalError, Interrupted, ServerError
from kl_bitexact.reach import summary
from kl_bitexact.reach.changes import ChangedCode
from kl_bitexact.reach.probe_dir import NOT_LAUNCHED, Probe
from kl_bitexact.results import verdict
from kl_bitexact.results.io import join_by_name
from kl_bitexact.results.model import (
    Cause,
    Fact,
    FunctionReach,
    PlannedTest,
    Reach,
    Results,
    RunInfo,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)
from kl_bitexact.run import engines, facts, server
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.checks.repeats import Attempt, fold
from kl_bitexact.run.engines.base import Engine, Identity, Reported, identity
from kl_bitexact.suite.model import ServerSpec, Suite, TestSpec

# A crashing server drops its connections a moment before it is seen to exit; under load
# that moment can last seconds. Waited only while the server does not answer /health, and
# only until it exits, so a generous bound costs a live server nothing.
DEATH_GRACE_S = 15.0


class Reporter(Protocol):
    """Hears about progress (the CLI prints it; tests may record it)."""

    def suite_started(self, suite: Suite) -> None: ...

    def test_finished(self, result: TestResult) -> None: ...

    def suite_finished(self, result: SuiteResult) -> None: ...

    def progress(self, line: str) -> None:
        """A server starting (every few seconds while it does), or not answering."""

    def server_failed(self, suite: Suite, error: ServerError) -> None:
        """The suite's server did not start or answer: each of its tests is an `error`
        with this message, told once here (not once per test, issue 27)."""


@dataclass(frozen=True)
class Plan:
    suites: tuple[Suite, ...]
    log_dir: Path
    run: RunInfo = field(default_factory=RunInfo)
    base_url: str | None = None  # overrides every suite's server
    teardown: server.Teardown = field(default_factory=server.Teardown)
    # How an engine adapter is made for a server (a benchmark wraps it to time requests).
    connect: Callable[..., Engine] = engines.connect
    # Checks of a suite reuse each other's cold phases (checks/phases.py); a benchmark
    # turns it off to measure what that saves.
    share_phases: bool = True
    # The flake meter: runs of each test, compared with each other (`run --repeat`).
    repeat: int = 1
    relaunch: bool = False  # each repeat on its own launch (one pass of the plan each)
    # Where servers start (`run --prove-base DIR`: the base revision's checkout, so that a
    # suite's relative server command runs the base's engine); None: this process's cwd.
    cwd: Path | None = None
    # `run --reach-diff`: the PR's changed functions, probed on every launched server.
    changes: ChangedCode | None = None

    @property
    def passes(self) -> int:
        return self.repeat if self.relaunch else 1

    @property
    def per_launch(self) -> int:
        return 1 if self.relaunch else self.repeat


def test_id(suite: Suite, spec: TestSpec) -> str:
    return f"{suite.name}::{spec.name}"


def launch_groups(suites: tuple[Suite, ...]) -> list[list[Suite]]:
    """Suites with an identical server spec, grouped in order of first appearance:
    each group shares one launch (a launch costs minutes on real runners)."""
    groups: dict[ServerSpec, list[Suite]] = {}
    for suite in suites:
        groups.setdefault(suite.server, []).append(suite)
    return list(groups.values())


def log_paths(log_dir: Path, groups: list[list[Suite]]) -> list[Path]:
    """`<suite>.log` for each launch group, named after its first suite; a later group of
    the same name (suite files sharing a name) gets `<suite>.2.log`, `.3`, ..."""
    paths: list[Path] = []
    for group in groups:
        stem = re.sub(r"[^\w.-]", "_", group[0].name)
        path, n = log_dir / f"{stem}.log", 1
        while path in paths:
            n += 1
            path = log_dir / f"{stem}.{n}.log"
        paths.append(path)
    return paths


@dataclass(frozen=True)
class Launch:
    """The server a suite runs on and what launching it cost that suite: the measured
    seconds for a fresh launch, 0.0 when an earlier suite's launch is shared, None when
    attached to a server someone else started."""

    server: server.Server
    seconds: float | None


def run_suites(plan: Plan, reporter: Reporter, save: Callable[[Results], None]) -> Results:
    earlier: dict[str, list[Attempt]] = {}  # each test's attempts in earlier passes
    final: Results | None = None
    latest = _doc(plan, [])  # what was saved last

    def saving(results: Results) -> None:
        nonlocal latest
        latest = results
        save(results)

    saving(latest)  # the plan, before anything can go wrong
    try:
        for launch in range(1, plan.passes + 1):
            final = _pass(plan, reporter, saving, _Repeats(launch, earlier), final)
    except BaseException as stop:
        save(unfinished(plan, latest, why_stopped(stop)))
        raise
    assert final is not None, "a plan makes at least one pass"
    final = structs.replace(final, run=structs.replace(final.run, finished=True))
    if plan.changes is None:
        return final
    # Every server has stopped, so each probed process has saved its line data.
    lines = summary.executed_lines(plan.log_dir / "reach")
    tests = [test for _, test in final.all_tests()]
    return structs.replace(final, changes=summary.changes(plan.changes, tests, lines))


def planned_tests(suites: tuple[Suite, ...]) -> tuple[PlannedTest, ...]:
    return tuple(
        PlannedTest(s.name, test_id(s, spec), spec.check.value) for s in suites for spec in s.tests
    )


def why_stopped(stop: BaseException) -> str:
    """The message of the tests an early end left without a verdict."""
    if isinstance(stop, Interrupted):
        return f"interrupted: {stop.name} before this test finished"
    if isinstance(stop, KeyboardInterrupt):
        return "interrupted: SIGINT before this test finished"
    if isinstance(stop, BrokenPipeError):
        return "stopped before this test finished: standard output was closed"
    detail = stop.message if isinstance(stop, FatalError) else f"{type(stop).__name__}: {stop}"
    return f"run aborted before this test finished: {detail}"


def unfinished(plan: Plan, so_far: Results, reason: str) -> Results:
    """The results so far plus an `error` for every planned test without a verdict."""
    reported = {test.id for _, test in so_far.all_tests()}
    rest = [
        SuiteResult(
            suite.name,
            ServerInfo(suite.server.engine.value, _args(plan, suite)),
            tuple(
                # No blocker excuses it: an interrupted test says nothing about the feature.
                structs.replace(error(suite, spec, reason, 0.0, cause=Cause.RUNNER), blocked_by=())
                for spec in suite.tests
                if test_id(suite, spec) not in reported
            ),
            file=suite.source,
        )
        for suite in plan.suites
    ]
    suites = join_by_name([*so_far.suites, *(s for s in rest if s.tests)])
    return structs.replace(so_far, suites=suites)


@dataclass(frozen=True)
class _Repeats:
    """Which pass is running, and what earlier passes measured of each test."""

    launch: int
    earlier: dict[str, list[Attempt]]

    def fold(self, attempts: list[Attempt]) -> TestResult:
        identifier = attempts[0].result.id
        everything = self.earlier.get(identifier, []) + attempts
        self.earlier[identifier] = everything
        return fold(everything)


def _pass(
    plan: Plan,
    reporter: Reporter,
    save: Callable[[Results], None],
    repeats: _Repeats,
    previous: Results | None,
) -> Results:
    done: list[SuiteResult] = []

    def save_with(current: SuiteResult) -> None:
        save(_overlay(previous, _doc(plan, [*done, current])))

    groups = launch_groups(plan.suites)
    told = _Told()  # each launch's own account of itself, asked once
    # `--relaunch`: each later pass logs beside the first (logs/launch-2/...), never over it.
    log_dir = plan.log_dir if repeats.launch == 1 else plan.log_dir / f"launch-{repeats.launch}"
    starter = _Starter(plan, reporter)
    for group, log in zip(groups, log_paths(log_dir, groups), strict=True):
        with closing(_servers(starter, group, log)) as pairs:
            try:
                for suite, running in pairs:
                    done.append(
                        _run_suite(suite, running, plan, reporter, save_with, repeats, told)
                    )
            except BaseException as error:
                # A stop signal or a crash mid-suite: thrown into the generator, which
                # stops its server at once, says why in the server's log, and re-raises.
                pairs.throw(error)
                raise
    return _overlay(previous, _doc(plan, done))


def _doc(plan: Plan, suites: list[SuiteResult]) -> Results:
    """Suites of one name from several files (or launches) become one SuiteResult; the
    run is unfinished until `run_suites` returns."""
    run = structs.replace(plan.run, finished=False)
    joined = join_by_name(suites)
    changes = None
    if plan.changes is not None:
        changes = summary.changes(plan.changes, [t for s in joined for t in s.tests])
    return Results(run=run, suites=joined, plan=planned_tests(plan.suites), changes=changes)


def _overlay(previous: Results | None, current: Results) -> Results:
    """A later pass's tests in place of the earlier pass's (the rest kept: a kill
    mid-pass loses no test)."""
    if previous is None:
        return current
    newer = {test.id: test for _, test in current.all_tests()}
    suites = tuple(
        structs.replace(s, tests=tuple(newer.get(t.id, t) for t in s.tests))
        for s in previous.suites
    )
    return structs.replace(previous, suites=suites)


def _servers(
    starter: _Starter, group: list[Suite], log: Path
) -> Generator[tuple[Suite, Launch | ServerError], None, None]:
    """Each suite of a launch group with its server, launched once and relaunched only
    when it died; stopped when the group is done (or the run is interrupted)."""
    running: server.Server | None = None
    log.unlink(missing_ok=True)  # an earlier run's, into the same directory
    try:
        for suite in group:
            if running is not None and running.exit_code() is not None:
                running = None
            if running is None:
                try:
                    running = starter.start(suite, log, _named(group, starter.plan.changes))
                except ServerError as error:
                    yield suite, error
                    continue
                yield suite, Launch(running, running.launch_s)
            else:
                yield suite, Launch(running, 0.0)  # shared launch: no cost for this suite
    except GeneratorExit:
        raise
    except BaseException as error:
        if running is not None:
            running.stop(why=server.stop_reason(error))
            running = None
        raise
    finally:
        if running is not None:
            running.stop()


@dataclass
class _Starter:
    """Launches or attaches each suite's server, telling the reporter how it goes. A URL
    that did not answer is not waited for again in this pass: `--base-url` applies to every
    suite, and 30 s per suite of an unreachable URL said nothing new."""

    plan: Plan
    reporter: Reporter
    unreachable: dict[str, ServerError] = field(default_factory=dict)

    def start(self, suite: Suite, log: Path, named: tuple[str, ...] = ()) -> server.Server:
        """`named`: the functions the suites on this server name (probed when launched)."""
        label = f"suite {suite.name}"
        url = self.plan.base_url or suite.server.base_url
        progress = self.reporter.progress
        if not url:
            changes = self.plan.changes
            lines = changes.files if changes is not None else ()
            probe = Probe(self.plan.log_dir / "reach", log.stem, named, lines) if named else None
            return server.launch(
                suite.server,
                log,
                teardown=self.plan.teardown,
                label=label,
                cwd=self.plan.cwd,
                progress=progress,
                suite_file=suite.source,
                probe=probe,
            )
        if url in self.unreachable:  # the same words: the URL, not the suite, is at fault
            raise self.unreachable[url]
        try:
            return server.attach(url, label=label, progress=progress)
        except ServerError as error:
            self.unreachable[url] = error
            raise


@dataclass
class _Told:
    """What each launch reported of its configuration (`Engine.reported`), asked the first
    time a test states a fact and kept for the launch: one request per launch, however
    many suites and tests share it. A failed question is kept too: the server could not
    tell, and asking again per test would only repeat the wait."""

    answers: dict[server.Server, Reported] = field(default_factory=dict)

    def facts(self, engine: Engine, running: server.Server, spec: TestSpec) -> tuple[Fact, ...]:
        if not spec.expect:
            return ()
        if running not in self.answers:
            self.answers[running] = _reported(engine)
        return facts.check(spec.expect, self.answers[running])


def _reported(engine: Engine) -> Reported:
    try:
        return engine.reported()
    except EngineError as failure:
        return Reported("", {}, why_none=f"asking it failed: {failure.message}")


def _run_suite(
    suite: Suite,
    launched: Launch | ServerError,
    plan: Plan,
    reporter: Reporter,
    save: Callable[[SuiteResult], None],
    repeats: _Repeats,
    told: _Told,
) -> SuiteResult:
    reporter.suite_started(suite)
    if isinstance(launched, ServerError):
        reporter.server_failed(suite, launched)
    launch_s = launched.seconds if isinstance(launched, Launch) else None
    engine = _connect(plan, suite, launched.server) if isinstance(launched, Launch) else None
    found = _identity(engine, launched.server) if isinstance(launched, Launch) else Identity()
    info = ServerInfo(
        suite.server.engine.value,
        _args(plan, suite),
        launch_s,
        version=found.version,
        build=found.build,
        backend=found.backend,
    )
    result = SuiteResult(suite.name, info, file=suite.source)
    for attempts in _tests(suite, launched, engine, plan, repeats.launch, told):
        test = repeats.fold(attempts)
        result = structs.replace(result, tests=(*result.tests, test))
        save(result)
        reporter.test_finished(test)
    reporter.suite_finished(result)
    return result


def _connect(plan: Plan, suite: Suite, running: server.Server) -> Engine:
    return plan.connect(
        suite.server.engine,
        running.base_url,
        request_timeout=suite.server.request_timeout,
        dialect=suite.server.dialect,
    )


def _identity(engine: Engine | None, running: server.Server) -> Identity:
    """The engine's version, build and backend as the server reports them (results.json's
    server); a server that cannot say leaves them unknown, and its checks will say why."""
    try:
        info = engine.server_info() if engine is not None else {}
    except EngineError:
        info = {}
    return identity(info, server.log_lines(running.log_path))


def _tests(
    suite: Suite,
    launched: Launch | ServerError,
    engine: Engine | None,
    plan: Plan,
    launch: int,
    told: _Told,
) -> Iterator[list[Attempt]]:
    """Each test's attempts on this launch (`plan.per_launch` of them, fewer when one
    errs: the server is gone or the check cannot run)."""
    if isinstance(launched, ServerError) or engine is None:
        message = launched.message if isinstance(launched, ServerError) else "no engine"
        hint = launched.hint if isinstance(launched, ServerError) else None
        # A server someone else runs (a URL) that did not answer is the runner's; one we
        # launched from the suite's command may be the change's own build.
        attached = plan.base_url or suite.server.base_url
        cause = Cause.RUNNER if attached else Cause.SERVER
        for spec in suite.tests:
            failed = error(suite, spec, message, 0.0, hint=hint, cause=cause)
            yield [Attempt(failed, launch=launch)]
        return
    running = launched.server
    # One per suite: a relaunched server (next suite) starts with nothing to reuse.
    phases = Phases(engine)
    gone: str | None = None
    for spec in suite.tests:
        if gone is not None:
            message = f"not run: the server died earlier in this suite; {gone}"
            failed = error(suite, spec, message, 0.0, cause=Cause.SERVER)
            yield [Attempt(failed, launch=launch)]
            continue
        stated = told.facts(engine, running, spec)
        if any(not fact.holds for fact in stated):
            # Measuring would prove nothing about the path the test guards: say so instead.
            yield [Attempt(not_exercised(suite, spec, stated), launch=launch)]
            continue
        shared = phases if plan.share_phases else Phases(engine)
        changed = plan.changes.names if plan.changes is not None else ()
        attempts = _attempts(suite, spec, shared, running, (plan.per_launch, launch), changed)
        yield [dataclasses.replace(a, result=_with_facts(a.result, stated)) for a in attempts]
        gone = running.death_report()


def _attempts(
    suite: Suite,
    spec: TestSpec,
    phases: Phases,
    running: server.Server,
    times: tuple[int, int],
    changed: tuple[str, ...],
) -> list[Attempt]:
    """`times`: (count, launch): `count` runs of one test on launch `launch`; every run after
    the first shares no phase with anything (a reused answer would make repeats agree by
    construction). `changed`: the PR's changed functions, probed too."""
    count, launch = times
    attempts: list[Attempt] = []
    epoch = running.probe.begin() if running.probe is not None else 0
    for number in range(count):
        fresh = phases if number == 0 else Phases(phases.engine)
        result = checked(fresh.engine, spec, test_id(suite, spec), running, fresh)
        attempts.append(Attempt(result, fresh.scored, launch))
        if result.status is Status.ERROR:
            break
    reach = reach_of(spec, running, epoch, changed)
    if reach is None:
        return attempts
    return [dataclasses.replace(a, result=with_reach(a.result, reach)) for a in attempts]


def with_reach(result: TestResult, reach: Reach) -> TestResult:
    """The result with its reach: `not_exercised` when a function it names did not run, or
    its reach could not be measured (results/verdict.py, the one rule)."""
    return verdict.exercised(structs.replace(result, reach=reach))


def _named(group: list[Suite], changes: ChangedCode | None) -> tuple[str, ...]:
    """The functions a launch's probe watches: every name its suites' tests give, and the
    PR's changed functions."""
    named = (name for suite in group for spec in suite.tests for name in spec.reach)
    return tuple(dict.fromkeys((*named, *(changes.names if changes is not None else ()))))


def reach_of(
    spec: TestSpec, running: server.Server, epoch: int, changed: tuple[str, ...] = ()
) -> Reach | None:
    """What the test reached of the functions it names, and which of the PR's `changed`
    functions ran while it ran (None: neither asked); a server kl-bitexact did not launch
    measured nothing, and says so."""
    if not spec.reach and not changed:
        return None
    if running.probe is None:
        unknown = tuple(FunctionReach(name, False) for name in spec.reach)
        return Reach(False, unknown, NOT_LAUNCHED)
    named = running.probe.reach(epoch, spec.reach)
    if not changed or not named.measured:
        return named
    ran = tuple(f for f in running.probe.reach(epoch, changed).functions if f.ran)
    return structs.replace(named, changed=ran)


def checked(
    engine: Engine,
    spec: TestSpec,
    result_id: str,
    running: server.Server,
    phases: Phases | None = None,
) -> TestResult:
    """Run one check; a transport failure becomes an `error` naming a server death."""
    started = time.monotonic()
    try:
        return run_check(engine, spec, result_id, phases)
    except EngineError as failure:
        death = running.death_report(grace_s=DEATH_GRACE_S)
        message = f"{failure.message}; {death}" if death else failure.message
        elapsed = time.monotonic() - started
        cause = Cause.SERVER if death else Cause.CHECK
        return _error(result_id, spec, message, elapsed, hint=failure.hint, cause=cause)


def not_exercised(suite: Suite, spec: TestSpec, stated: tuple[Fact, ...]) -> TestResult:
    """A test whose server is not what it claims to test, measured no further."""
    blank = TestResult(test_id(suite, spec), spec.check.value, Status.PASSED, facts=stated)
    status, reasons = verdict.judge(blank, planned=False)
    return structs.replace(
        blank,
        status=status,
        kl_threshold=spec.kl_threshold,
        blocked_by=spec.blocked_by,
        message=verdict.not_exercised_message(reasons),
        hint=FACTS_HINT,
    )


FACTS_HINT = (
    "start the server with the arguments that give these facts, or correct the suite's "
    "`expect` (docs/suites.md, Server facts)"
)


def _with_facts(result: TestResult, stated: tuple[Fact, ...]) -> TestResult:
    return structs.replace(result, facts=stated) if stated else result


def error(
    suite: Suite,
    spec: TestSpec,
    message: str,
    duration_s: float,
    *,
    hint: str | None = None,
    cause: Cause = Cause.CHECK,
) -> TestResult:
    return _error(test_id(suite, spec), spec, message, duration_s, hint=hint, cause=cause)


def _error(
    result_id: str,
    spec: TestSpec,
    message: str,
    duration_s: float,
    *,
    hint: str | None = None,
    cause: Cause = Cause.CHECK,
) -> TestResult:
    return TestResult(
        id=result_id,
        check=spec.check.value,
        status=Status.ERROR,
        kl_threshold=spec.kl_threshold,
        blocked_by=spec.blocked_by,
        duration_s=duration_s,
        message=message,
        hint=hint or "",
        cause=cause,
    )


def _args(plan: Plan, suite: Suite) -> tuple[str, ...]:
    url = plan.base_url or suite.server.base_url
    return ("--base-url", url) if url else suite.server.command

"""The cross-checks: every registration is allowlisted, every allowlisted suite is
dispatched by a workflow, every dispatched suite has an enabled test (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from kl_bitexact.errors import did_you_mean
from kl_bitexact.registry import paths, sglang_partition
from kl_bitexact.registry.allowlists import NIGHTLY, PER_COMMIT, Allowlist, AllowlistEntry
from kl_bitexact.registry.findings import Code, Finding, error, ordered, warning
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.registry.repo import RepoState
from kl_bitexact.registry.workflows import Dispatch

# Names written into Python and YAML by --fix come from PR-controlled files: anything
# beyond this alphabet could inject code into run_suite.py or break the workflow.
SAFE_SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def lint(state: RepoState) -> list[Finding]:
    findings = [finding for scanned in state.files for finding in scanned.findings]
    findings += _unsafe_names(state)
    findings += _not_allowlisted(state)
    findings += _not_dispatched(state)
    findings += _empty_dispatches(state)
    findings += _unknown_runners(state)
    findings += _nothing_registered(state)
    findings += _unresolved(state)
    findings += _cadence(state)
    findings += _timeouts(state)
    findings += _time_limits(state)
    return ordered(findings)


def allowlist_of(state: RepoState, registration: Registration) -> tuple[Allowlist, str]:
    """The allowlist that decides whether CI knows `registration`, and its file."""
    if registration.backend != SUITE_FILE_BACKEND and state.python_allowlist is not None:
        return state.python_allowlist, state.config.python_allowlist
    return state.yaml_allowlist, state.config.allowlist


def runs_of(state: RepoState, suite: str, backend: str | None) -> list[Dispatch]:
    """The runs of `suite` that select `backend`'s registrations: the runner's `--hw` is
    part of the match (a run whose backend cannot be read counts for every backend; a
    `backend` of None: any run of the suite)."""
    if backend is None:
        return list(state.workflows.by_suite.get(suite, ()))
    runs = state.workflows.by_suite_backend
    return [*runs.get((suite, backend), ()), *runs.get((suite, None), ())]


def is_dispatched(state: RepoState, suite: str, backend: str | None) -> bool:
    """Whether some workflow runs `suite` for `backend` (suite files: also when a
    kl-bitexact glob matches the file registering it)."""
    if runs_of(state, suite, backend):
        return True
    return backend in (SUITE_FILE_BACKEND, None) and any(
        r.backend == SUITE_FILE_BACKEND and r.suite == suite and _globbed(state, r.file)
        for r in state.registrations
    )


def _globbed(state: RepoState, path: str) -> bool:
    return any(paths.matches(path, glob.pattern) for glob in state.workflows.globs)


def _unsafe_names(state: RepoState) -> list[Finding]:
    return [
        _unsafe_name(r)
        for r in state.registrations
        if not SAFE_SUITE_NAME.fullmatch(r.suite)
        and not (r.suite == "" and r.file in state.run_by_path)  # a placeholder run by path
    ]


def _unsafe_name(r: Registration) -> Finding:
    if r.suite == "":
        return error(
            r.file,
            r.line,
            Code.BAD_SUITE_NAME,
            "the suite name is empty: no suite run selects this file, and no workflow runs "
            "it by path, so it never runs",
            "name the suite the file belongs to, or run the file by path in a workflow "
            "(a `test_case:` matrix entry)",
        )
    return error(
        r.file,
        r.line,
        Code.BAD_SUITE_NAME,
        f"suite name {r.suite!r} has characters CI configuration cannot carry safely",
        "use only letters, digits, '.', '_' and '-' in suite, stage and runner_config",
    )


def _not_allowlisted(state: RepoState) -> list[Finding]:
    findings = []
    for registration in state.registrations:
        allowlist, where = allowlist_of(state, registration)
        if allowlist.allows(registration.suite, registration.backend):
            continue
        validated = _validated(state, registration, where)
        if not registration.enabled and not validated:
            continue  # disabled on purpose, and nothing checks its suite name: no harm
        by_path = registration.file in state.run_by_path and not validated
        if by_path and not is_dispatched(state, registration.suite, registration.backend):
            continue  # a workflow runs it by path, and nothing checks its suite name
        findings.append(_not_allowlisted_finding(state, registration, where))
    return findings


def _validated(state: RepoState, r: Registration, where: str) -> bool:
    """Whether the suite runner checks `r`'s suite name, disabled or not (sglang's
    validate_all_suites runs before any filtering)."""
    return where.endswith(".py") and state.semantics.validates(r.backend)


def _not_allowlisted_finding(state: RepoState, r: Registration, where: str) -> Finding:
    runs = is_dispatched(state, r.suite, r.backend)
    backend = "" if r.backend == SUITE_FILE_BACKEND else f" for {r.backend}"
    also = "" if runs else f" and no workflow dispatches it{backend}"
    group = "NIGHTLY_SUITES" if r.nightly else "PER_COMMIT_SUITES"
    target = f"{group}[{r.backend}] in {where}" if where.endswith(".py") else where
    fix = (
        f"add {r.suite!r} to {target}"
        + ("" if runs else " and to a workflow matrix")
        + " (`kl-bitexact lint-ci --fix` does this), or fix the suite name"
    )
    if not where.endswith(".py"):
        breaks = "CI does not know the suite, so its tests never run"
    elif state.semantics.validates(r.backend):
        breaks = (
            f"{where} validates {r.backend} suite names before running anything, so every "
            "job that runs it fails, for every suite and backend"
        )
    elif runs:
        return warning(
            r.file,
            r.line,
            Code.NOT_ALLOWLISTED,
            f"suite {r.suite!r} ({r.backend}) is in no allowlist: {where} does not validate "
            f"{r.backend} suite names, so the file still runs, with an 'unknown suite' warning",
            fix,
        )
    else:
        breaks = (
            f"{where} does not validate {r.backend} suite names, so nothing fails: the file "
            "silently never runs"
        )
    return error(
        r.file,
        r.line,
        Code.NOT_ALLOWLISTED,
        f"suite {r.suite!r} ({r.backend}) is in no allowlist{also}: {breaks}",
        fix,
    )


def _not_dispatched(state: RepoState) -> list[Finding]:
    entries = list(state.yaml_allowlist.entries)
    entries += list(state.python_allowlist.entries) if state.python_allowlist else []
    findings = []
    by_suite = _by_suite(state)
    for entry in entries:
        if is_dispatched(state, entry.suite, entry.backend):
            continue
        files = _enabled_files(by_suite.get(entry.suite, ()), entry)
        unrun = files - state.run_by_path.keys()
        if unrun or not files:  # files run by path do run
            findings.append(_not_dispatched_finding(entry, len(unrun), len(files - unrun)))
    return findings


def _by_suite(state: RepoState) -> dict[str, list[Registration]]:
    """The registrations of each suite (sglang's 2,000 looked through once, not once per
    allowlist entry)."""
    found: dict[str, list[Registration]] = {}
    for r in state.registrations:
        found.setdefault(r.suite, []).append(r)
    return found


def _enabled_files(registrations: Iterable[Registration], entry: AllowlistEntry) -> set[str]:
    """Enabled files registered to the entry's suite for its backend (YAML: any backend)."""
    return {
        r.file
        for r in registrations
        if r.enabled
        and r.suite == entry.suite
        and (entry.backend is None or r.backend == entry.backend)
    }


def _not_dispatched_finding(entry: AllowlistEntry, enabled: int, by_path: int) -> Finding:
    backend = f" {entry.backend}" if entry.backend else ""
    if enabled == 0:
        return warning(
            entry.file,
            entry.line,
            Code.NOT_DISPATCHED,
            f"allowlisted{backend} suite {entry.suite!r} has no enabled{backend} test and no "
            f"workflow runs it{' for' + backend if backend else ''}",
            "remove the stale entry, or register tests and dispatch the suite in a workflow",
        )
    return error(
        entry.file,
        entry.line,
        Code.NOT_DISPATCHED,
        f"allowlisted{backend} suite {entry.suite!r} is dispatched by no workflow"
        f"{' for' + backend if backend else ''}: its {enabled} enabled test file(s) "
        "silently never run" + (f" ({by_path} other(s) run by path)" if by_path else ""),
        "add the suite to a workflow matrix (stage + runner_config, or a `suite` entry) or a "
        "`--suite` argument (`kl-bitexact lint-ci --fix` adds a matrix entry)",
    )


def _empty_dispatches(state: RepoState) -> list[Finding]:
    """Runs that select no enabled test (one finding per suite and backend in the workflow
    file that causes it): the runner selects by backend (`--hw`), suite and cadence
    (`--nightly`)."""
    first: dict[tuple[str, str | None, str], Dispatch] = {}
    for dispatch in sorted(state.workflows.dispatches, key=lambda d: cause(d)[1]):
        first.setdefault((dispatch.suite, dispatch.backend, cause(dispatch)[0]), dispatch)
    enabled: set[tuple[str, str | None, bool | None]] = set()
    for r in state.registrations:
        if r.enabled:  # what a run selects, with its backend or cadence unknown (None)
            for backend in (r.backend, None):
                enabled.update({(r.suite, backend, r.nightly), (r.suite, backend, None)})
    findings = [
        _empty_finding(dispatch)
        for dispatch in first.values()
        if (dispatch.suite, dispatch.backend, dispatch.nightly) not in enabled
    ]
    return findings + _empty_globs(state)


def _empty_finding(d: Dispatch) -> Finding:
    run = f" for {d.backend}" if d.backend else ""
    if d.nightly is not None:
        run += " with --nightly" if d.nightly else " without --nightly"
    test = f" {d.backend}" if d.backend else ""
    cadence = "" if d.nightly is None else f" registered with nightly={d.nightly}"
    return error(
        *cause(d),
        Code.EMPTY_SUITE,
        f"the workflow runs suite {d.suite!r}{run}, which has no enabled{test} test"
        f"{cadence}: it reports green without testing anything",
        "register tests to the suite (or re-enable them), or remove it from the workflow",
    )


def cause(d: Dispatch) -> tuple[str, int]:
    """Where a problem of this run is caused: the runner's command when it names the suite
    literally (one place, however many workflows call the one that runs it), else where
    the suite's name is given (a matrix entry, a caller's `with:`)."""
    return (d.runner_file, d.runner_line) if d.suite_literal else (d.file, d.line)


def _run_place(d: Dispatch) -> str:
    """The run, and where its suite is named when that is elsewhere."""
    named = "" if d.suite_literal else f" (suite named at {d.file}:{d.line})"
    return f"the run at {d.runner_file}:{d.runner_line}{named}"


def _empty_globs(state: RepoState) -> list[Finding]:
    return [
        error(
            glob.file,
            glob.line,
            Code.EMPTY_SUITE,
            f"kl-bitexact is asked to run {glob.pattern!r}, which matches no suite file",
            "fix the path, or add suite files matching it under "
            + ", ".join(state.config.suite_files),
        )
        for glob in state.workflows.globs
        if not any(paths.matches(path, glob.pattern) for path in state.suite_files)
    ]


def known_runners(state: RepoState) -> set[str]:
    """The runner table, else the runner_configs the workflows use; plus configured ones."""
    table = state.runner_table if state.runner_table is not None else state.workflows.runner_configs
    return set(table) | set(state.config.runners)


def runner_table_covers(state: RepoState, backend: str) -> bool:
    """Whether the runner table lists `backend`'s runner_configs (sglang's lists CUDA's;
    `registry.runner-table-backends`); without a table, the runner_configs the workflows
    use stand for every backend's."""
    if state.runner_table is None:
        return True
    return backend == SUITE_FILE_BACKEND or backend in state.config.runner_table_backends


def _unknown_runners(state: RepoState) -> list[Finding]:
    known = known_runners(state)
    if not known:
        return []  # no runner table at all: nothing to compare against
    table = (
        f"the runner table {state.config.runner_table}"
        if state.runner_table is not None
        else "the runner_configs the workflows use"
    )
    return [
        error(
            r.file,
            r.line,
            Code.UNKNOWN_RUNNER,
            f"runner_config {r.runner_config!r} is not in {table} (known: "
            f"{', '.join(sorted(known))}), so no runner would pick the suite up",
            _runner_fix(r.runner_config, known),
        )
        for r in state.registrations
        if r.runner_config is not None
        and r.enabled
        and runner_table_covers(state, r.backend)
        and r.runner_config not in known
    ]


def _runner_fix(runner: str, known: set[str]) -> str:
    close = did_you_mean(runner, known)
    typo = f"{close} " if close else ""
    return f"{typo}use a known runner_config, or add it to the runner table"


def _nothing_registered(state: RepoState) -> list[Finding]:
    """A lint that read no registration checked nothing: say so instead of passing quietly."""
    if state.files:
        return []
    registered = tuple(root.pattern for root in state.registered) or state.config.registered
    globs = ", ".join(registered + state.config.suite_files)
    return [
        warning(
            ".",
            1,
            Code.NOTHING_REGISTERED,
            f"no test or suite file matches {globs}: there was nothing to check",
            "point `registry.registered` / `registry.suite-files` in .kl-bitexact.yaml at "
            "your tests, or pass --root",
        )
    ]


def _unresolved(state: RepoState) -> list[Finding]:
    return [
        warning(
            item.file,
            item.line,
            Code.UNRESOLVED_DISPATCH,
            f"cannot tell which suite this runs: {item.expression} has a value only the run "
            "knows, so whatever it runs is not counted as dispatched",
            "write the suite from inputs, matrix or env values the workflow sets (or "
            "literally); if it is dynamic on purpose, check the suites it runs by hand",
        )
        for item in state.workflows.unresolved
    ]


def _runner_dispatches(state: RepoState, r: Registration) -> list[Dispatch]:
    """Runs of the suite runner that select `r`'s suite for its backend."""
    return [d for d in runs_of(state, r.suite, r.backend) if d.nightly is not None]


def _cadence(state: RepoState) -> list[Finding]:
    """run_suite.py selects files whose `nightly` equals its `--nightly` flag."""
    findings = []
    cadences: dict[tuple[str, str], set[bool]] = {}
    for r in state.registrations:
        if r.backend == SUITE_FILE_BACKEND or not r.enabled:
            continue
        if (r.suite, r.backend) not in cadences:
            runs = _runner_dispatches(state, r)
            cadences[(r.suite, r.backend)] = {bool(d.nightly) for d in runs}
        flags = cadences[(r.suite, r.backend)]
        if flags:
            if r.nightly not in flags:
                findings.append(_cadence_by_runs(r, flags))
            continue
        expected = _cadence_by_allowlist(state, r)
        if expected is not None and expected != r.nightly:
            findings.append(_cadence_by_list(state, r, expected))
    return findings


def _cadence_by_allowlist(state: RepoState, r: Registration) -> bool | None:
    """True/False when the suite is only in the nightly / only in the per-commit group."""
    allowlist, _ = allowlist_of(state, r)
    groups = {
        entry.group
        for entry in allowlist.entries
        if entry.suite == r.suite and entry.backend in (None, r.backend)
    }
    nightly = bool(groups & {NIGHTLY, "nightly"})
    per_commit = bool(groups & {PER_COMMIT, "suites"})
    return nightly if nightly != per_commit else None


def _cadence_by_runs(r: Registration, flags: set[bool]) -> Finding:
    how = "with --nightly" if True in flags else "without --nightly"
    return error(
        r.file,
        r.line,
        Code.CADENCE_MISMATCH,
        f"registered with nightly={r.nightly} to {r.suite!r}, which the workflows run only "
        f"{how}; run_suite.py selects files whose nightly flag matches, so this one never runs",
        f"write nightly={not r.nightly} in the registration, or register it to a suite that "
        "runs at its cadence",
    )


def _cadence_by_list(state: RepoState, r: Registration, expected: bool) -> Finding:
    group = "a nightly" if expected else "a per-commit"
    _, where = allowlist_of(state, r)
    return error(
        r.file,
        r.line,
        Code.CADENCE_MISMATCH,
        f"registered with nightly={r.nightly} to {r.suite!r}, {group} suite in {where}: "
        f"`run_suite.py {'--nightly' if expected else ''}` selects only files with "
        f"nightly={expected}, so this one is never run",
        f"write nightly={expected} in the registration (or move the suite to the other list)",
    )


def _timeouts(state: RepoState) -> list[Finding]:
    findings = []
    tightest: dict[tuple[str, str, bool], tuple[float, Dispatch] | None] = {}
    for r in state.registrations:
        if r.backend == SUITE_FILE_BACKEND or not r.enabled or r.est_time <= 0:
            continue
        key = (r.suite, r.backend, r.nightly)
        if key not in tightest:
            tightest[key] = _tightest_run(state, r)
        run = tightest[key]
        if run is not None and r.est_time > run[0]:
            findings.append(_timeout_finding(r, run[1], run[0]))
    return findings


def _tightest_run(state: RepoState, r: Registration) -> tuple[float, Dispatch] | None:
    """The run selecting `r` (backend, suite, cadence) with the smallest per-file limit."""
    limits = [
        (limit, d)
        for d in _runner_dispatches(state, r)
        if d.nightly == r.nightly and (limit := _timeout_of(state, d)) is not None
    ]
    return min(limits, key=lambda item: (item[0], item[1].file, item[1].line), default=None)


def _timeout_of(state: RepoState, d: Dispatch) -> float | None:
    """Seconds run_suite.py gives one file in this run (None: only the run knows)."""
    if d.timeout_from_est or not d.timeout_known:
        return None
    limit = d.timeout if d.timeout is not None else state.semantics.timeout_per_file
    if limit is None:
        return None  # the runner sets no per-file limit
    increase = d.retry_increase
    if increase is None:
        increase = state.semantics.retry_timeout_increase
    return limit + (increase if d.retry else 0.0)


def _timeout_finding(r: Registration, d: Dispatch, limit: float) -> Finding:
    given = "--timeout-per-file" if d.timeout is not None else "the runner's default timeout"
    return error(
        r.file,
        r.line,
        Code.TIMEOUT_EXCEEDED,
        f"est_time={r.est_time:g} s is above the {limit:g} s per-file limit ({given}) of "
        f"{_run_place(d)}: the file is killed on every run",
        "split the file, raise that run's --timeout-per-file (a matrix `timeout_per_file`), "
        "or correct est_time if the file is faster",
    )


def _time_limits(state: RepoState) -> list[Finding]:
    """Runs whose selected files (or the longest partition of them, as sglang's
    auto_partition splits them by est_time) cannot finish within the step's time limit
    (its `timeout-minutes`, or the job's): one finding per run and suite."""
    by_suite: dict[str, list[Registration]] = {}
    for r in state.registrations:
        if r.enabled and r.backend != SUITE_FILE_BACKEND:
            by_suite.setdefault(r.suite, []).append(r)
    findings: dict[tuple[str, int, str, str | None, bool | None], Finding] = {}
    for d in state.workflows.dispatches:
        key = (d.runner_file, d.runner_line, d.suite, d.backend, d.nightly)
        if key in findings or d.limit_minutes is None or (d.partitioned and not d.partitions):
            continue
        selected = _selected(by_suite.get(d.suite, []), d)
        finding = _time_limit_finding(state, d, selected, d.limit_minutes)
        if finding is not None:
            findings[key] = finding
    return list(findings.values())


def _selected(registrations: list[Registration], d: Dispatch) -> list[Registration]:
    """The files of the suite a run of the suite runner selects (backend, cadence)."""
    return [
        r
        for r in registrations
        if (d.backend is None or r.backend == d.backend)
        and (d.nightly is None or r.nightly == d.nightly)
    ]


def _time_limit_finding(
    state: RepoState, d: Dispatch, selected: list[Registration], minutes: float
) -> Finding | None:
    cap = _timeout_of(state, d)  # a file is killed at the per-file limit, if there is one
    capped = [replace(r, est_time=cap) if cap and r.est_time > cap else r for r in selected]
    units = sglang_partition.units(capped, {})
    shards = sglang_partition.partition(units, d.partitions) if d.partitions else [units]
    longest = max(shards, key=lambda shard: sum(u.seconds for u in shard), default=[])
    seconds = sum(unit.seconds for unit in longest)
    if seconds <= minutes * 60:
        return None
    files = sum(len(unit.files) for unit in longest)
    part = f"its longest of {d.partitions} partitions, " if d.partitions else ""
    capped_note = ""
    if cap and any(r.est_time > cap for r in selected):
        capped_note = f", each file counted at most the run's {cap:,.0f} s per-file limit"
    return error(
        *cause(d),
        Code.TIME_LIMIT_EXCEEDED,
        f"suite {d.suite!r} ({part}{files} file(s)) is estimated at {seconds:,.0f} s by "
        f"est_time{capped_note}, above the {minutes * 60:,.0f} s that {d.limit_from} "
        f"allows {_run_place(d)}: the step is cancelled before its files finish",
        "split the suite (more partitions: `kl-bitexact shard --timeout MIN`), raise "
        "timeout-minutes, or correct est_time if the files are faster",
    )

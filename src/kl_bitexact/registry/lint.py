"""The cross-checks: every registration is allowlisted, every allowlisted suite is
dispatched by a workflow, every dispatched suite has an enabled test (pure)."""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Iterable

from kl_bitexact.registry import paths
from kl_bitexact.registry.allowlists import Allowlist, AllowlistEntry
from kl_bitexact.registry.findings import Code, Finding, error, ordered, warning
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.registry.repo import RepoState
from kl_bitexact.registry.workflows import Dispatch

# Names written into Python and YAML by --fix come from PR-controlled files: anything
# beyond this alphabet could inject code into run_suite.py or break the workflow.
SAFE_SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def lint(state: RepoState) -> list[Finding]:
    findings = [finding for scanned in state.files for finding in scanned.findings]
    findings += _unsafe_names(state.registrations)
    findings += _not_allowlisted(state)
    findings += _not_dispatched(state)
    findings += _empty_dispatches(state)
    findings += _unknown_runners(state)
    findings += _nothing_registered(state)
    return ordered(findings)


def allowlist_of(state: RepoState, registration: Registration) -> tuple[Allowlist, str]:
    """The allowlist that decides whether CI knows `registration`, and its file."""
    if registration.backend != SUITE_FILE_BACKEND and state.python_allowlist is not None:
        return state.python_allowlist, state.config.python_allowlist
    return state.yaml_allowlist, state.config.allowlist


def dispatched_suites(state: RepoState) -> set[str]:
    """Suite names some workflow runs, including suite files matched by a kl-bitexact glob."""
    globbed = {
        registration.suite
        for registration in state.registrations
        if registration.backend == SUITE_FILE_BACKEND and _globbed(state, registration.file)
    }
    return state.workflows.dispatched() | globbed


def _globbed(state: RepoState, path: str) -> bool:
    return any(paths.matches(path, glob.pattern) for glob in state.workflows.globs)


def _unsafe_names(registrations: Iterable[Registration]) -> list[Finding]:
    return [
        error(
            r.file,
            r.line,
            Code.BAD_SUITE_NAME,
            f"suite name {r.suite!r} has characters CI configuration cannot carry safely",
            "use only letters, digits, '.', '_' and '-' in suite, stage and runner_config",
        )
        for r in registrations
        if not SAFE_SUITE_NAME.fullmatch(r.suite)
    ]


def _not_allowlisted(state: RepoState) -> list[Finding]:
    dispatched = dispatched_suites(state)
    findings = []
    for registration in state.registrations:
        allowlist, where = allowlist_of(state, registration)
        if not allowlist.allows(registration.suite, registration.backend):
            findings.append(_not_allowlisted_finding(registration, where, dispatched))
    return findings


def _not_allowlisted_finding(r: Registration, where: str, dispatched: set[str]) -> Finding:
    also = "" if r.suite in dispatched else " and no workflow dispatches it"
    breaks = (
        "run_suite.py's validation rejects it, failing every suite (or never runs it)"
        if where.endswith(".py")
        else "CI does not know the suite, so its tests never run"
    )
    group = "NIGHTLY_SUITES" if r.nightly else "PER_COMMIT_SUITES"
    target = f"{group}[{r.backend}] in {where}" if where.endswith(".py") else where
    return error(
        r.file,
        r.line,
        Code.NOT_ALLOWLISTED,
        f"suite {r.suite!r} ({r.backend}) is in no allowlist{also}: {breaks}",
        f"add {r.suite!r} to {target}"
        + ("" if r.suite in dispatched else " and to a workflow matrix")
        + " (`kl-bitexact lint-ci --fix` does this), or fix the suite name",
    )


def _not_dispatched(state: RepoState) -> list[Finding]:
    dispatched = dispatched_suites(state)
    enabled = _enabled_count(state.registrations)
    entries = list(state.yaml_allowlist.entries)
    entries += list(state.python_allowlist.entries) if state.python_allowlist else []
    return [
        _not_dispatched_finding(entry, enabled[entry.suite])
        for entry in entries
        if entry.suite not in dispatched
    ]


def _not_dispatched_finding(entry: AllowlistEntry, enabled: int) -> Finding:
    if enabled == 0:
        return warning(
            entry.file,
            entry.line,
            Code.NOT_DISPATCHED,
            f"allowlisted suite {entry.suite!r} has no enabled test and no workflow runs it",
            "remove the stale entry, or register tests and dispatch the suite in a workflow",
        )
    return error(
        entry.file,
        entry.line,
        Code.NOT_DISPATCHED,
        f"allowlisted suite {entry.suite!r} is dispatched by no workflow: its {enabled} "
        "enabled test file(s) silently never run",
        "add the suite to a workflow matrix (stage + runner_config, or a `suite` entry) or a "
        "`--suite` argument (`kl-bitexact lint-ci --fix` adds a matrix entry)",
    )


def _empty_dispatches(state: RepoState) -> list[Finding]:
    """Dispatched suites without an enabled test (one finding per suite and workflow)."""
    enabled = _enabled_count(state.registrations)
    first: dict[tuple[str, str], Dispatch] = {}
    for dispatch in sorted(state.workflows.dispatches, key=lambda d: d.line):
        first.setdefault((dispatch.suite, dispatch.file), dispatch)
    findings = [
        error(
            dispatch.file,
            dispatch.line,
            Code.EMPTY_SUITE,
            f"the workflow runs suite {dispatch.suite!r}, which has no enabled test: it "
            "reports green without testing anything",
            "register tests to the suite (or re-enable them), or remove it from the workflow",
        )
        for dispatch in first.values()
        if enabled[dispatch.suite] == 0
    ]
    return findings + _empty_globs(state)


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


def _unknown_runners(state: RepoState) -> list[Finding]:
    known = known_runners(state)
    if not known:
        return []  # no runner table at all: nothing to compare against
    return [
        error(
            r.file,
            r.line,
            Code.UNKNOWN_RUNNER,
            f"runner_config {r.runner_config!r} is in no runner table (known: "
            f"{', '.join(sorted(known))}), so no runner would pick the suite up",
            _runner_fix(r.runner_config, known),
        )
        for r in state.registrations
        if r.runner_config is not None and r.runner_config not in known
    ]


def _runner_fix(runner: str, known: set[str]) -> str:
    close = difflib.get_close_matches(runner, sorted(known), n=1)
    typo = f"did you mean {close[0]!r}? " if close else ""
    return f"{typo}use a known runner_config, or add it to the runner table"


def _nothing_registered(state: RepoState) -> list[Finding]:
    """A lint that read no registration checked nothing: say so instead of passing quietly."""
    if state.files:
        return []
    globs = ", ".join(state.config.registered + state.config.suite_files)
    return [
        warning(
            ".",
            None,
            Code.NOTHING_REGISTERED,
            f"no test or suite file matches {globs}: there was nothing to check",
            "point `registry.registered` / `registry.suite-files` in .kl-bitexact.yaml at "
            "your tests, or pass --root",
        )
    ]


def _enabled_count(registrations: Iterable[Registration]) -> dict[str, int]:
    files: dict[str, set[str]] = defaultdict(set)
    for registration in registrations:
        if registration.enabled:
            files[registration.suite].add(registration.file)
    return defaultdict(int, {suite: len(found) for suite, found in files.items()})

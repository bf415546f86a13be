"""`lint-ci --fix`: register missing suites in the allowlist and a workflow matrix.

The plan is computed from the repository state (pure); each planned edit is a minimal text
insertion (`pyedit`, `yamledit`) verified by parsing the result, and an edit that cannot be
made safely is skipped, leaving its finding in place. Running it twice changes nothing the
second time: the second run finds every suite registered and plans no edit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kl_bitexact.registry import paths, yamlio
from kl_bitexact.registry.edits import EditError
from kl_bitexact.registry.findings import Code, Finding
from kl_bitexact.registry.lint import (
    SAFE_SUITE_NAME,
    allowlist_of,
    is_dispatched,
    known_runners,
    runner_table_covers,
)
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.registry.repo import RepoState, read_text
from kl_bitexact.registry.workflows import SUITES_INPUT, MatrixTarget

_SUITE_IN_MESSAGE = re.compile(r"suite '([^']+)'")
_FIX_DOES_THIS = re.compile(r" \(`kl-bitexact lint-ci --fix` [^)]*\)")
_FIXABLE = (Code.NOT_ALLOWLISTED.value, Code.NOT_DISPATCHED.value)
YAML_HEADER = "# Suites CI runs, checked by `kl-bitexact lint-ci` (created by `lint-ci --fix`).\n"


@dataclass(frozen=True)
class AllowlistAddition:
    file: str
    group: str  # PER_COMMIT_SUITES / NIGHTLY_SUITES, or the YAML list suites / nightly
    backend: str
    suite: str

    def __str__(self) -> str:
        where = f"{self.group}[{self.backend}]" if self.file.endswith(".py") else self.group
        return f"added {self.suite!r} to {where} in {self.file}"


@dataclass(frozen=True)
class MatrixAddition:
    file: str
    job: str
    kind: str
    entry: tuple[tuple[str, str], ...]  # the new matrix include entry, or ("suite", name)
    why: str = ""  # the evidence for this job

    def __str__(self) -> str:
        if self.kind == SUITES_INPUT:
            suite = dict(self.entry)["suite"]
            where = f"added {suite!r} to the `suites:` of job {self.job!r} in {self.file}"
        else:
            values = ", ".join(f"{key}: {value}" for key, value in self.entry)
            where = f"added {{{values}}} to the matrix of job {self.job!r} in {self.file}"
        return f"{where}: {self.why}" if self.why else where


Edit = AllowlistAddition | MatrixAddition


@dataclass(frozen=True)
class FixPlan:
    edits: tuple[Edit, ...]
    declined: Mapping[str, str]  # suite -> why --fix leaves it to a human

    @property
    def unreachable(self) -> tuple[str, ...]:
        return tuple(self.declined)


def plan(state: RepoState, only: str | None = None) -> FixPlan:
    """The edits that register each fixable suite (only `only`, when given). A suite is
    allowlisted only with evidence: a job already runs it for its backend, or a matrix is
    found that runs its kind of suite for that backend (then both are added); and never
    when it has no enabled test (the next lint would call the entry stale)."""
    edits: list[Edit] = []
    declined: dict[str, str] = {}
    known = known_runners(state)
    for registration in state.registrations:
        if only is not None and registration.suite != only:
            continue
        covered = runner_table_covers(state, registration.backend)
        reason = _unfixable(known if covered else set(), registration)
        if reason is not None:
            declined.setdefault(registration.suite, reason)
            continue
        allowlist, file = allowlist_of(state, registration)
        listed = allowlist.allows(registration.suite, registration.backend)
        if not registration.enabled:
            validated = file.endswith(".py") and state.semantics.validates(registration.backend)
            if not listed and validated and not _has_enabled(state, registration):
                declined.setdefault(registration.suite, _ALL_DISABLED)
            continue  # an enabled registration to the suite decides for it
        placement: list[MatrixAddition] = []
        if not is_dispatched(state, registration.suite, registration.backend):
            placement, why_not = _matrix_addition(state, registration)
            if not placement:
                # Allowlisting a suite nothing will run would only hide the problem.
                declined.setdefault(registration.suite, why_not)
                continue
        if not listed:
            edits.append(_allowlist_addition(file, registration))
        edits.extend(placement)
    return FixPlan(tuple(dict.fromkeys(edits)), declined)


_ALL_DISABLED = (
    "every registration to it is disabled, so no run would test anything: an allowlist "
    "entry would be stale (re-enable a test first, or leave it out)"
)


def _has_enabled(state: RepoState, r: Registration) -> bool:
    return any(
        other.enabled and other.suite == r.suite and other.backend == r.backend
        for other in state.registrations
    )


def _unfixable(known: set[str], registration: Registration) -> str | None:
    """Why a registration must not be written anywhere: unsafe, or a likely typo."""
    if not SAFE_SUITE_NAME.fullmatch(registration.suite):
        return "its name has characters CI configuration cannot carry safely"
    runner = registration.runner_config
    if runner is not None and known and runner not in known:
        return f"runner_config {runner!r} is in no runner table (a typo, or a runner CI lacks)"
    return None


def _allowlist_addition(file: str, r: Registration) -> AllowlistAddition:
    if file.endswith(".py"):
        group = "NIGHTLY_SUITES" if r.nightly else "PER_COMMIT_SUITES"
    else:
        group = "nightly" if r.nightly else "suites"
    return AllowlistAddition(file, group, r.backend, r.suite)


def _matrix_addition(state: RepoState, r: Registration) -> tuple[list[MatrixAddition], str]:
    """Where the suite goes, by evidence, or why nowhere."""
    if r.backend == SUITE_FILE_BACKEND:
        return _suites_input_addition(state, r)
    if r.stage is not None and r.runner_config is not None:
        return _pair_addition(state, r)
    return _suite_axis_addition(state, r)


def _suites_input_addition(state: RepoState, r: Registration) -> tuple[list[MatrixAddition], str]:
    """A suite file's suite joins the `suites:` names of a reusable-workflow call."""
    for target in state.workflows.targets:
        if target.kind == SUITES_INPUT:
            why = "the job already runs kl-bitexact suite files (review its runners)"
            entry = (("suite", r.suite),)
            return [MatrixAddition(target.file, target.job, target.kind, entry, why)], ""
    return [], "no job calls kl-bitexact's reusable workflow with a `suites:` list"


def _alike(target: MatrixTarget, r: Registration) -> str | None:
    """Why `target` cannot take `r` (another backend or cadence), None when it can."""
    if target.backends and r.backend not in target.backends:
        return f"job {target.job!r} runs {'/'.join(sorted(target.backends))}, not {r.backend}"
    if target.nightly and r.nightly not in target.nightly:
        cadence = "nightly" if True in target.nightly else "per-commit"
        return f"job {target.job!r} runs {cadence} suites"
    return None


def _pair_addition(state: RepoState, r: Registration) -> tuple[list[MatrixAddition], str]:
    """The job whose matrix already runs this stage for this backend (its runner family)."""
    assert r.stage is not None and r.runner_config is not None
    same_stage = [t for t in state.workflows.targets if t.kind == "pair" and r.stage in t.stages]
    fitting = [t for t in same_stage if _alike(t, r) is None]
    if not fitting:
        refusals = "; ".join(filter(None, (_alike(t, r) for t in same_stage)))
        return [], (
            f"no job's matrix runs stage {r.stage!r} for {r.backend}"
            + (f" ({refusals})" if refusals else "")
            + ", so nothing shows where it belongs"
        )
    target = sorted(
        fitting, key=lambda t: (r.runner_config not in t.runner_configs, t.file, t.job)
    )[0]
    gated = " (label-gated, as the stage already is)" if target.label_gated else ""
    why = (
        f"its matrix already runs stage {r.stage} for {r.backend} on "
        f"{', '.join(sorted(target.runner_configs))}{gated}"
    )
    entry = (("stage", r.stage), ("runner_config", r.runner_config))
    return [MatrixAddition(target.file, target.job, target.kind, entry, why)], ""


def _suite_axis_addition(state: RepoState, r: Registration) -> tuple[list[MatrixAddition], str]:
    """A `suite` axis already running suites of the same backend and cadence."""
    refusals = []
    for target in state.workflows.targets:
        if target.kind != "suite":
            continue
        problem = _alike(target, r) or _cadence_unknown(state, target, r)
        if problem is None and target.label_gated and not r.nightly:
            problem = f"job {target.job!r} runs only on labelled pull requests"
        if problem is not None:
            refusals.append(problem)
            continue
        cadence = "nightly" if r.nightly else "per-commit"
        why = f"its `suite` axis already runs {r.backend} {cadence} suites"
        entry = (("suite", r.suite),)
        return [MatrixAddition(target.file, target.job, target.kind, entry, why)], ""
    return [], (
        f"no job's `suite` axis runs {r.backend} {'nightly' if r.nightly else 'per-commit'} suites"
        + (f" ({'; '.join(refusals)})" if refusals else "")
    )


def _cadence_unknown(state: RepoState, target: MatrixTarget, r: Registration) -> str | None:
    """Without runner evidence, the axis must hold a suite of the same backend and cadence."""
    if target.backends and target.nightly:
        return None
    alike = {
        other.suite
        for other in state.registrations
        if other.backend == r.backend and other.nightly == r.nightly
    }
    return None if alike & target.suites else f"job {target.job!r} runs other suites"


def annotate(found: Sequence[Finding], planned: FixPlan) -> list[Finding]:
    """Say in each finding --fix does not repair that it needs a human, and why."""
    fixed = {
        edit.suite if isinstance(edit, AllowlistAddition) else dict(edit.entry).get("suite", "")
        for edit in planned.edits
    } | {
        f"{dict(edit.entry)['stage']}-test-{dict(edit.entry)['runner_config']}"
        for edit in planned.edits
        if isinstance(edit, MatrixAddition) and "stage" in dict(edit.entry)
    }
    annotated = []
    for finding in found:
        match = _SUITE_IN_MESSAGE.search(finding.message)
        suite = match.group(1) if match else None
        if finding.code in _FIXABLE and suite in fixed:
            annotated.append(finding)
            continue
        reason = planned.declined.get(suite or "")
        why = f" (--fix does not: {reason})" if reason else ""
        text = _FIX_DOES_THIS.sub("", finding.fix)
        annotated.append(replace(finding, fix=f"needs a human{why}: {text}"))
    return annotated


# --- applying ---------------------------------------------------------------------------


def apply(root: Path, state: RepoState, only: str | None = None) -> list[str]:
    """Make the planned edits; returns one line per change (or per edit skipped)."""
    planned = plan(state, only)
    report = []
    for edit in planned.edits:
        try:
            text, note = _edited(root, edit)
            _write(root, edit.file, text)
            report.append(f"fixed: {edit}{note}")
        except EditError as problem:
            report.append(f"not fixed: {edit}: {problem}")
    report += [f"not fixed: {suite!r}: {why}" for suite, why in planned.declined.items()]
    return report


def _edited(root: Path, edit: Edit) -> tuple[str, str]:
    """The edited text of `edit.file`, and a note on what was left out."""
    # The editors (ruamel.yaml's round-trip parser) are loaded only when there is an edit.
    from kl_bitexact.registry import pyedit, yamledit

    path = paths.inside(root, edit.file)
    if paths.outside_root(root, edit.file):
        # Neither read (lint-ci reads nothing outside --root) nor written: see _write.
        raise EditError(f"{edit.file} resolves outside the repository; not editing it")
    if isinstance(edit, AllowlistAddition):
        if edit.file.endswith(".py"):
            source = read_text(root, edit.file)
            return pyedit.add_suite(source, edit.file, edit.group, edit.backend, edit.suite), ""
        text = read_text(root, edit.file) if path.is_file() else YAML_HEADER
        return yamledit.append(text, edit.file, (edit.group,), edit.suite), ""
    keys = ("jobs", edit.job, "strategy", "matrix")
    text = read_text(root, edit.file)
    suite = dict(edit.entry).get("suite", "")
    if edit.kind == SUITES_INPUT:
        return yamledit.add_word(text, edit.file, ("jobs", edit.job, "with", "suites"), suite), ""
    if edit.kind == "suite":
        return yamledit.append(text, edit.file, (*keys, "suite"), suite), ""
    entry, note = _entry_like_siblings(text, edit)
    return yamledit.append(text, edit.file, (*keys, "include"), entry), note


def _entry_like_siblings(text: str, edit: MatrixAddition) -> tuple[dict[str, object], str]:
    """The new include entry: stage and runner_config, plus each other key only when at
    least two sibling entries exist and all share its value (a per-entry setting such as
    `timeout_per_file` belongs to its runner, not to a newcomer). Also says what it left out."""
    include = yamlio.load_round_trip(text, edit.file)["jobs"][edit.job]["strategy"]["matrix"][
        "include"
    ]
    wanted: dict[str, object] = dict(edit.entry)
    siblings = [entry for entry in include if isinstance(entry, dict)]
    shared: dict[str, object] = {}
    left_out = []
    for key in dict.fromkeys(str(k) for entry in siblings for k in entry):
        if key in wanted:
            continue
        values = [entry.get(key) for entry in siblings]
        if len(siblings) >= 2 and all(value == values[0] for value in values):
            shared[key] = values[0]
        else:
            left_out.append(f"{key} ({', '.join(sorted({repr(v) for v in values}))})")
    note = (
        f"; not copied, as its entries differ or are too few: {', '.join(left_out)}"
        if left_out
        else ""
    )
    return {**wanted, **shared}, note


def _write(root: Path, relative: str, text: str) -> None:
    path = paths.inside(root, relative)
    if not path.resolve().is_relative_to(root.resolve()):
        # A symlink in the repository must not steer the edit to a file outside it.
        raise EditError(f"{relative} resolves outside the repository; not writing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

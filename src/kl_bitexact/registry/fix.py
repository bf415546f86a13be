"""`lint-ci --fix`: register missing suites in the allowlist and a workflow matrix.

The plan is computed from the repository state (pure); each planned edit is a minimal text
insertion (`pyedit`, `yamledit`) verified by parsing the result, and an edit that cannot be
made safely is skipped, leaving its finding in place. Running it twice changes nothing the
second time: the second run finds every suite registered and plans no edit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.registry import paths, pyedit, yamledit, yamlio
from kl_bitexact.registry.edits import EditError
from kl_bitexact.registry.lint import (
    SAFE_SUITE_NAME,
    allowlist_of,
    dispatched_suites,
    known_runners,
)
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.registry.repo import RepoState, read_text
from kl_bitexact.registry.workflows import SUITES_INPUT, MatrixTarget

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

    def __str__(self) -> str:
        if self.kind == SUITES_INPUT:
            suite = dict(self.entry)["suite"]
            return f"added {suite!r} to the `suites:` of job {self.job!r} in {self.file}"
        values = ", ".join(f"{key}: {value}" for key, value in self.entry)
        return f"added {{{values}}} to the matrix of job {self.job!r} in {self.file}"


Edit = AllowlistAddition | MatrixAddition


@dataclass(frozen=True)
class FixPlan:
    edits: tuple[Edit, ...]
    unreachable: tuple[str, ...]  # suites no workflow runs and no matrix could take


def plan(state: RepoState) -> FixPlan:
    fixable = [r for r in state.registrations if _fixable(state, r)]
    edits: list[Edit] = []
    for registration in fixable:
        allowlist, file = allowlist_of(state, registration)
        if not allowlist.allows(registration.suite, registration.backend):
            edits.append(_allowlist_addition(file, registration))
    dispatched = dispatched_suites(state)
    unreachable = []
    for registration in fixable:
        if registration.enabled and registration.suite not in dispatched:
            additions = _matrix_addition(state, registration)
            edits.extend(additions)
            unreachable += [] if additions else [registration.suite]
    return FixPlan(tuple(dict.fromkeys(edits)), tuple(dict.fromkeys(unreachable)))


def _fixable(state: RepoState, registration: Registration) -> bool:
    """Safe to write, and not a likely typo (an unknown runner_config is one)."""
    known = known_runners(state)
    runner = registration.runner_config
    return bool(SAFE_SUITE_NAME.fullmatch(registration.suite)) and (
        runner is None or not known or runner in known
    )


def _allowlist_addition(file: str, r: Registration) -> AllowlistAddition:
    if file.endswith(".py"):
        group = "NIGHTLY_SUITES" if r.nightly else "PER_COMMIT_SUITES"
    else:
        group = "nightly" if r.nightly else "suites"
    return AllowlistAddition(file, group, r.backend, r.suite)


def _matrix_addition(state: RepoState, r: Registration) -> list[MatrixAddition]:
    if r.backend == SUITE_FILE_BACKEND:
        return _suites_input_addition(state, r)
    if r.stage is not None and r.runner_config is not None and not r.nightly:
        target = _pair_target(state.workflows.targets, r.stage, r.runner_config)
        if target is None:
            return []
        entry = (("stage", r.stage), ("runner_config", r.runner_config))
        return [MatrixAddition(target.file, target.job, target.kind, entry)]
    target = _suite_target(state, r)
    if target is None:
        return []
    return [MatrixAddition(target.file, target.job, target.kind, (("suite", r.suite),))]


def _suites_input_addition(state: RepoState, r: Registration) -> list[MatrixAddition]:
    """A suite file's suite joins the `suites:` names of a reusable-workflow call."""
    for target in state.workflows.targets:
        if target.kind == SUITES_INPUT:
            return [MatrixAddition(target.file, target.job, target.kind, (("suite", r.suite),))]
    return []


def _pair_target(targets: Iterable[MatrixTarget], stage: str, runner: str) -> MatrixTarget | None:
    pairs = [target for target in targets if target.kind == "pair"]
    ranked = sorted(
        pairs, key=lambda t: (stage not in t.stages, runner not in t.runner_configs, t.file, t.job)
    )
    return ranked[0] if ranked else None


def _suite_target(state: RepoState, r: Registration) -> MatrixTarget | None:
    """A `suite` axis already running suites of the same backend and cadence."""
    alike = {
        other.suite
        for other in state.registrations
        if other.backend == r.backend and other.nightly == r.nightly
    }
    for target in state.workflows.targets:
        if target.kind == "suite" and alike & target.suites:
            return target
    return None


# --- applying ---------------------------------------------------------------------------


def apply(root: Path, state: RepoState) -> list[str]:
    """Make the planned edits; returns one line per change (or per edit skipped)."""
    planned = plan(state)
    report = []
    for edit in planned.edits:
        try:
            _write(root, edit.file, _edited(root, edit))
            report.append(f"fixed: {edit}")
        except EditError as problem:
            report.append(f"not fixed: {edit}: {problem}")
    report += [
        f"not fixed: no workflow matrix runs suites like {suite!r}; add a job that runs it"
        for suite in planned.unreachable
    ]
    return report


def _edited(root: Path, edit: Edit) -> str:
    path = paths.inside(root, edit.file)
    if isinstance(edit, AllowlistAddition):
        if edit.file.endswith(".py"):
            source = read_text(root, edit.file)
            return pyedit.add_suite(source, edit.file, edit.group, edit.backend, edit.suite)
        text = read_text(root, edit.file) if path.is_file() else YAML_HEADER
        return yamledit.append(text, edit.file, (edit.group,), edit.suite)
    keys = ("jobs", edit.job, "strategy", "matrix")
    text = read_text(root, edit.file)
    if edit.kind == SUITES_INPUT:
        suite = dict(edit.entry)["suite"]
        return yamledit.add_word(text, edit.file, ("jobs", edit.job, "with", "suites"), suite)
    if edit.kind == "suite":
        return yamledit.append(text, edit.file, (*keys, "suite"), dict(edit.entry)["suite"])
    return yamledit.append(text, edit.file, (*keys, "include"), _entry_like_siblings(text, edit))


def _entry_like_siblings(text: str, edit: MatrixAddition) -> dict[str, object]:
    """The new include entry, with the other keys copied from the closest sibling."""
    include = yamlio.load(text, edit.file)["jobs"][edit.job]["strategy"]["matrix"]["include"]
    wanted = dict(edit.entry)
    siblings = [entry for entry in include if isinstance(entry, dict)]
    ranked = sorted(
        siblings,
        key=lambda e: (
            e.get("runner_config") != wanted["runner_config"],
            e.get("stage") != wanted["stage"],
        ),
    )
    model = ranked[0] if ranked else {}
    return {**{str(key): value for key, value in model.items()}, **wanted}


def _write(root: Path, relative: str, text: str) -> None:
    path = paths.inside(root, relative)
    if not path.resolve().is_relative_to(root.resolve()):
        # A symlink in the repository must not steer the edit to a file outside it.
        raise EditError(f"{relative} resolves outside the repository; not writing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

"""Which suites GitHub Actions workflows really dispatch.

A suite counts as dispatched when a workflow names it literally, after `${{ matrix.* }}`
expressions are resolved against the job's matrix: a matrix entry with `stage` and
`runner_config` (sglang's pr-test*.yml), a matrix `suite` value, a reusable-workflow input
`suite`/`self_name`, a `--suite NAME` argument in a `run:` script, or a kl-bitexact call
whose `suites:` names the suite (the reusable workflow, the action's `command: shard`) or
globs its suite file (the action's `command: run`, or `kl-bitexact run FILE` in a script).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.scalarstring import LiteralScalarString

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import yamlio
from kl_bitexact.registry.model import suite_name

SUITE_INPUTS = ("suite", "self_name")
SUITES_INPUT = "suites-input"
# GitHub: "A matrix will generate a maximum of 256 jobs per workflow run."
MAX_MATRIX_JOBS = 256
_MATRIX_EXPRESSION = re.compile(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}")
# The value may be an expression such as `${{ matrix.suite }}`, spaces included.
_SUITE_ARGUMENT = re.compile(r"--suite(?:=|\s+)([\"']?)((?:\$\{\{[^}]*\}\}|[^\s\"';|&])+)\1")
_RUN_COMMAND = re.compile(r"(?:kl-bitexact|kl_bitexact)\s+run\s+([^\n;&|]*)")


@dataclass(frozen=True)
class Dispatch:
    """A place where a workflow runs `suite`."""

    suite: str
    file: str
    line: int


@dataclass(frozen=True)
class SuiteGlob:
    """Suite files a kl-bitexact call runs (its `suites:` input or `run` arguments)."""

    pattern: str
    file: str
    line: int


@dataclass(frozen=True)
class MatrixTarget:
    """A job matrix that `--fix` can extend with a new suite."""

    file: str
    job: str
    # "pair": matrix include entries with stage + runner_config; "suite": a matrix suite
    # axis; SUITES_INPUT: the `suites:` names of a call of the reusable workflow
    kind: str
    stages: frozenset[str] = frozenset()
    runner_configs: frozenset[str] = frozenset()
    suites: frozenset[str] = frozenset()  # the values of a "suite" axis


@dataclass(frozen=True)
class Workflows:
    dispatches: tuple[Dispatch, ...] = ()
    globs: tuple[SuiteGlob, ...] = ()
    runner_configs: frozenset[str] = frozenset()
    targets: tuple[MatrixTarget, ...] = ()

    def dispatched(self) -> set[str]:
        return {dispatch.suite for dispatch in self.dispatches}

    def __add__(self, other: Workflows) -> Workflows:
        return Workflows(
            self.dispatches + other.dispatches,
            self.globs + other.globs,
            self.runner_configs | other.runner_configs,
            self.targets + other.targets,
        )


@dataclass
class _Collector:
    path: str
    dispatches: list[Dispatch] = field(default_factory=list)
    globs: list[SuiteGlob] = field(default_factory=list)
    runner_configs: set[str] = field(default_factory=set)
    targets: list[MatrixTarget] = field(default_factory=list)


def read_workflow(text: str, path: str) -> Workflows:
    document = yamlio.load(text, path)
    jobs = document.get("jobs") if isinstance(document, dict) else None
    collector = _Collector(path)
    if isinstance(jobs, dict):
        for job_id, job in jobs.items():
            if isinstance(job, dict):
                _read_job(str(job_id), job, collector)
    return Workflows(
        tuple(collector.dispatches),
        tuple(collector.globs),
        frozenset(collector.runner_configs),
        tuple(collector.targets),
    )


def _read_job(job_id: str, job: Any, out: _Collector) -> None:
    strategy = job.get("strategy")
    matrix = strategy.get("matrix") if isinstance(strategy, dict) else None
    combos = list(matrix_combinations(matrix, out.path))
    _read_matrix(job_id, matrix, combos, out)
    contexts = [values for values, _ in combos] or [{}]
    _read_inputs(job, contexts, out, job_id)
    for step in job.get("steps") or []:
        if isinstance(step, dict):
            _read_inputs(step, contexts, out)
            _read_run(step, contexts, out)


def matrix_combinations(matrix: Any, path: str = "") -> Iterator[tuple[dict[str, Any], int]]:
    """(values, line) for each product combination and each `include` entry; a product
    GitHub would refuse to run (over MAX_MATRIX_JOBS) is an error, not expanded."""
    if not isinstance(matrix, dict):
        return  # e.g. `matrix: ${{ fromJson(...) }}`: unknown until run time
    axes = [
        (key, values)
        for key, values in matrix.items()
        if key not in ("include", "exclude") and isinstance(values, list)
    ]
    count = math.prod(len(values) for _, values in axes)
    if axes and count > MAX_MATRIX_JOBS:
        line = yamlio.node_line(matrix)
        raise ConfigError(
            f"{path}{f':{line}' if line else ''}: a job matrix of {count} combinations; "
            f"GitHub runs at most {MAX_MATRIX_JOBS} jobs per matrix, so it is not expanded",
            hint="split the matrix, or list the combinations under `include:`",
        )
    # A combination is located at its `suite` value when there is one (what lint reports).
    where = next((i for i, (key, _) in enumerate(axes) if key == "suite"), 0)
    for indexes in itertools.product(*(range(len(values)) for _, values in axes)):
        if not axes:
            break
        combo = {key: values[i] for (key, values), i in zip(axes, indexes, strict=True)}
        yield combo, yamlio.item_line(axes[where][1], indexes[where]) or 1
    include = matrix.get("include")
    if isinstance(include, list):
        for index, entry in enumerate(include):
            if isinstance(entry, dict):
                yield dict(entry), yamlio.item_line(include, index) or 1


def _read_matrix(
    job_id: str, matrix: Any, combos: list[tuple[dict[str, Any], int]], out: _Collector
) -> None:
    stages: set[str] = set()
    runners: set[str] = set()
    for values, line in combos:
        stage, runner, suite = (values.get(key) for key in ("stage", "runner_config", "suite"))
        if isinstance(runner, str):
            runners.add(runner)
        if isinstance(stage, str) and isinstance(runner, str):
            stages.add(stage)
            out.dispatches.append(Dispatch(suite_name(stage, runner), out.path, line))
        if isinstance(suite, str) and _literal(suite):
            out.dispatches.append(Dispatch(suite, out.path, line))
    out.runner_configs |= runners
    if stages:
        target = MatrixTarget(out.path, job_id, "pair", frozenset(stages), frozenset(runners))
        out.targets.append(target)
    axis = matrix.get("suite") if isinstance(matrix, dict) else None
    if isinstance(axis, list):
        suites = frozenset(str(value) for value in axis)
        out.targets.append(MatrixTarget(out.path, job_id, "suite", suites=suites))


def _read_inputs(
    node: Any, contexts: list[dict[str, Any]], out: _Collector, job_id: str | None = None
) -> None:
    """`with:` of a reusable-workflow job (`job_id` given) or of an action step."""
    inputs = node.get("with")
    if not isinstance(inputs, dict):
        return
    call = _kl_bitexact_call(node, inputs)
    for key, value in inputs.items():
        if not isinstance(value, str):
            continue
        line = yamlio.key_line(inputs, key) or 1
        resolved = _resolve_all(value, contexts)
        if key in SUITE_INPUTS or (key == "suites" and call == "names"):
            names = {name for text in resolved for name in text.split()}
            out.dispatches.extend(Dispatch(name, out.path, line) for name in sorted(names))
        elif key == "runner_config":
            out.runner_configs |= resolved
        elif key == "suites" and call == "files":
            patterns = sorted({pattern for text in resolved for pattern in text.split()})
            out.globs.extend(SuiteGlob(pattern, out.path, line) for pattern in patterns)
    suites = inputs.get("suites")
    if job_id is not None and call == "names" and isinstance(suites, str) and _literal(suites):
        listed = frozenset(suites.split())
        out.targets.append(MatrixTarget(out.path, job_id, SUITES_INPUT, suites=listed))


def _kl_bitexact_call(node: Any, inputs: Any) -> str | None:
    """What a kl-bitexact call's `suites:` holds: "names" (the reusable workflow, or the
    action's `command: shard`), "files" (the action's `command: run`), else None."""
    uses = str(node.get("uses", ""))
    if "kl-bitexact" not in uses:
        return None
    if "/.github/workflows/" in uses:
        return "names"
    command = inputs.get("command", "run")
    return {"run": "files", "shard": "names"}.get(str(command))


def _read_run(step: Any, contexts: list[dict[str, Any]], out: _Collector) -> None:
    script = step.get("run")
    if not isinstance(script, str):
        return
    # A `run: |` block starts on the line after its key.
    block = isinstance(script, LiteralScalarString)
    first_line = (yamlio.key_line(step, "run") or 1) + (1 if block else 0)
    for offset, text in enumerate(script.splitlines()):
        line = first_line + offset
        for match in _SUITE_ARGUMENT.finditer(text):
            for resolved in _resolve_all(match.group(2), contexts):
                out.dispatches.append(Dispatch(resolved, out.path, line))
        for match in _RUN_COMMAND.finditer(text):
            for resolved in _resolve_all(match.group(1), contexts):
                out.globs.extend(
                    SuiteGlob(token, out.path, line)
                    for token in resolved.split()
                    if token.endswith((".yaml", ".yml"))
                )


def _resolve_all(value: str, contexts: list[dict[str, Any]]) -> set[str]:
    """The literal values `value` takes across the matrix (unresolvable ones dropped)."""
    resolved = {_substitute(value, context) for context in contexts}
    return {text for text in resolved if _literal(text)}


def _substitute(value: str, context: dict[str, Any]) -> str:
    def replace(match: re.Match[str]) -> str:
        found = context.get(match.group(1))
        return str(found) if isinstance(found, (str, int, float)) else match.group(0)

    return _MATRIX_EXPRESSION.sub(replace, value).strip()


def _literal(text: str) -> bool:
    return bool(text) and "${{" not in text

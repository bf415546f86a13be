"""Which suites GitHub Actions workflows really dispatch, followed the way the runner does.

A suite is dispatched where a `run:` script starts the configured suite runner (by path:
`cd test && python3 run_suite.py --suite X` is test/run_suite.py, another script of the same
name is not) with `--suite X`. Values are followed as the runner would: `${{ }}` expressions
over `inputs` (a reusable workflow is read once per caller job and matrix combination, with
the `with:` values that caller passes), `matrix` (product, `exclude`, `include`) and `env`
(workflow, job and step level), then shell variables assigned from them (`$SUITE`,
`${SUITE}`, `"$SUITE"`). What cannot be resolved becomes an `Unresolved`, never a suite name.

Also dispatches: a call of a reusable workflow that is not in the repository with a `suite`
/ `self_name` input (its runner cannot be read); a kl-bitexact call whose `suites:` names
the suite (its reusable workflow, the action's `command: shard`) or globs its suite file
(the action's `command: run`, or `kl-bitexact run FILE` in a script).
"""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import expressions, shell, yamlio
from kl_bitexact.registry.expressions import UNKNOWN
from kl_bitexact.registry.model import suite_name

SUITE_INPUTS = ("suite", "self_name")
SUITES_INPUT = "suites-input"
DEFAULT_RUNNERS = ("test/run_suite.py",)
_RUN_COMMAND = re.compile(r"(?:kl-bitexact|kl_bitexact)\s+run\s+([^\n;&|]*)")
_MARKED = re.compile(re.escape(shell.UNKNOWN_MARK) + r"(\d+)" + re.escape(shell.UNKNOWN_MARK))
_MAX_CALL_DEPTH = 4
# GitHub: "A matrix will generate a maximum of 256 jobs per workflow run."
MAX_MATRIX_JOBS = 256
# GitHub: a job's `timeout-minutes` defaults to 360.
DEFAULT_JOB_MINUTES = 360.0


@dataclass(frozen=True)
class Dispatch:
    """A place where a workflow runs `suite`."""

    suite: str
    file: str
    line: int
    job: str = ""
    # Set when the suite runner itself was read (else None / False: unknown).
    backend: str | None = None
    nightly: bool | None = None
    timeout: float | None = None  # --timeout-per-file seconds; None: not given
    timeout_known: bool = True  # False: given, but by a value only the run knows
    timeout_from_est: bool = False  # --timeout-from-est-time
    retry: bool = False  # --enable-retry
    retry_increase: float | None = None  # --retry-timeout-increase; None: the runner's default
    runner_line: int = 0  # line of the runner command (in `runner_file`)
    runner_file: str = ""
    # The suite is written literally in the runner's command (not from a matrix or input):
    # the run line is where it is caused, whichever caller reaches it.
    suite_literal: bool = False
    # --auto-partition-size (None: not partitioned, or a size only the run knows)
    partitions: int | None = None
    partitioned: bool = False  # --auto-partition-id given
    # What GitHub gives the step: the smaller of the step's and the job's timeout-minutes
    # (the job's defaults to 360); None when only the run knows. `limit_from` says where.
    limit_minutes: float | None = None
    limit_from: str = ""


@dataclass(frozen=True)
class DirectRun:
    """A file a workflow runs by path (`python3 test/x.py`, `pytest test/dir/`)."""

    path: str  # repository-relative; for pytest possibly a directory
    # "python" (run as a program), "pytest" (collected), "argument" (handed to a program
    # that runs it: `--test-case PATH`)
    how: str
    file: str
    line: int

    def runs(self, file: str) -> bool:
        if file == self.path:
            return True
        return self.how == "pytest" and file.startswith(self.path.rstrip("/") + "/")


@dataclass(frozen=True)
class Unresolved:
    """A suite runner started with a suite (or script) only the run can know."""

    file: str
    line: int
    expression: str


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
    label_gated: bool = False
    backends: frozenset[str] = frozenset()  # --hw of the runs this job's entries reach
    nightly: frozenset[bool] = frozenset()  # --nightly of those runs


@dataclass(frozen=True)
class Workflows:
    dispatches: tuple[Dispatch, ...] = ()
    globs: tuple[SuiteGlob, ...] = ()
    runner_configs: frozenset[str] = frozenset()
    targets: tuple[MatrixTarget, ...] = ()
    unresolved: tuple[Unresolved, ...] = ()
    direct: tuple[DirectRun, ...] = ()

    def dispatched(self) -> set[str]:
        return {dispatch.suite for dispatch in self.dispatches}

    @cached_property
    def by_suite(self) -> Mapping[str, tuple[Dispatch, ...]]:
        found: dict[str, list[Dispatch]] = {}
        for dispatch in self.dispatches:
            found.setdefault(dispatch.suite, []).append(dispatch)
        return {suite: tuple(items) for suite, items in found.items()}

    @cached_property
    def by_suite_backend(self) -> Mapping[tuple[str, str | None], tuple[Dispatch, ...]]:
        """Runs by (suite, --hw); a backend of None: the runner's backend is unknown."""
        found: dict[tuple[str, str | None], list[Dispatch]] = {}
        for dispatch in self.dispatches:
            found.setdefault((dispatch.suite, dispatch.backend), []).append(dispatch)
        return {key: tuple(items) for key, items in found.items()}

    def __add__(self, other: Workflows) -> Workflows:
        return Workflows(
            self.dispatches + other.dispatches,
            self.globs + other.globs,
            self.runner_configs | other.runner_configs,
            self.targets + other.targets,
            self.unresolved + other.unresolved,
            self.direct + other.direct,
        )


@dataclass(frozen=True)
class _Inputs:
    """The inputs one caller gives a reusable workflow (values None: unknown)."""

    values: Mapping[str, Any] | None
    origin_file: str = ""
    origin_job: str = ""
    origin_line: int | None = None  # the caller's matrix combination, when it has one
    with_lines: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Collector:
    dispatches: list[Dispatch] = field(default_factory=list)
    globs: list[SuiteGlob] = field(default_factory=list)
    runner_configs: set[str] = field(default_factory=set)
    unresolved: dict[tuple[str, int, str], Unresolved] = field(default_factory=dict)
    direct: list[DirectRun] = field(default_factory=list)
    matrices: list[tuple[str, str, Any, bool]] = field(default_factory=list)


def read_workflow(
    text: str,
    path: str,
    runners: Sequence[str] = DEFAULT_RUNNERS,
    checkout: shell.Checkout = shell.NO_CHECKOUT,
    markers: Sequence[str] = (),
) -> Workflows:
    return read_all({path: yamlio.load(text, path)}, runners, checkout, markers)


def read_all(
    documents: Mapping[str, Any],
    runners: Sequence[str] = DEFAULT_RUNNERS,
    checkout: shell.Checkout = shell.NO_CHECKOUT,
    markers: Sequence[str] = (),
) -> Workflows:
    """Every workflow of the repository together (callers resolve reusable workflows);
    `checkout` gives the wrapper scripts the workflows start, and which container paths
    are files of the checkout; a script with one of `markers` in it (`registered/`) is
    followed for the test files it runs by path."""
    runner_paths = tuple(runner.removeprefix("./") for runner in runners)
    return _Reader(documents, runner_paths, checkout, tuple(markers)).read()


class _Reader:
    def __init__(
        self,
        documents: Mapping[str, Any],
        runners: tuple[str, ...],
        checkout: shell.Checkout,
        markers: tuple[str, ...] = (),
    ) -> None:
        self.documents = {path: doc for path, doc in documents.items() if isinstance(doc, dict)}
        self.runners = runners
        self.markers = markers
        self.runner_names = {posixpath.basename(runner) for runner in runners}
        words = (*sorted(self.runner_names), *markers)
        # what a script that can run a suite runner or a registered file has in its text
        self.names = re.compile("|".join(map(re.escape, words)) if words else "(?!)")
        self.followed: dict[tuple[str, tuple[tuple[str, str], ...], str], shell.Followed] = {}
        self.facts: dict[str, tuple[bool, bool, frozenset[str]]] = {}
        self.named_contexts: dict[tuple[int, int], tuple[Any, Any, bool]] = {}
        self.step_plans: dict[int, tuple[Any, list[_PlannedStep]]] = {}
        self.time_limits: dict[tuple[int, int], tuple[float | None, str]] = {}
        self.expanded: dict[str, frozenset[str]] = {}
        self.contexts: dict[tuple[str, int], list[_Inputs]] = {}
        self.checkout = checkout
        self.out = _Collector()
        # wrapper -> (file, line, why) of each run that could not be followed through it
        self.opaque: dict[str, list[tuple[str, int, str]]] = {}
        self.callers: dict[str, list[tuple[str, str, Any]]] = {}
        for path, document in self.documents.items():
            for job_id, job in _jobs(document):
                callee = _local_callee(job)
                if callee is not None and callee in self.documents:
                    self.callers.setdefault(callee, []).append((path, job_id, job))

    def read(self) -> Workflows:
        for path, document in self.documents.items():
            for inputs in self.input_contexts(path, 0):
                self.read_file(path, document, inputs)
        return Workflows(
            tuple(dict.fromkeys(self.out.dispatches)),
            tuple(dict.fromkeys(self.out.globs)),
            frozenset(self.out.runner_configs),
            tuple(self._targets()),
            tuple(self.out.unresolved.values()) + tuple(self._opaque_wrappers()),
            tuple(dict.fromkeys(self.out.direct)),
        )

    def _opaque_wrappers(self) -> Iterator[Unresolved]:
        """One warning per wrapper that could not be followed, where it is first used."""
        for wrapper, uses in sorted(self.opaque.items()):
            places = sorted(set(uses))
            file, line, why = places[0]
            others = len({(f, n) for f, n, _ in places}) - 1
            also = f"; used the same way at {others} other place(s)" if others else ""
            yield Unresolved(
                file, line, f"the wrapper {wrapper} (its body cannot be followed: {why}{also})"
            )

    # --- inputs ------------------------------------------------------------------------

    def input_contexts(self, path: str, depth: int) -> list[_Inputs]:
        """Each set of inputs `path` is read with (once per caller job and matrix
        combination, callers' own callers followed); computed once per path and depth."""
        key = (path, depth)
        if key not in self.contexts:
            self.contexts[key] = self._input_contexts(path, depth)
        return self.contexts[key]

    def _input_contexts(self, path: str, depth: int) -> list[_Inputs]:
        document = self.documents[path]
        declared = _declared_inputs(document)
        contexts = []
        if _triggered_directly(document):
            contexts.append(_Inputs(dict(declared)))
        if "workflow_call" in _triggers(document) and depth < _MAX_CALL_DEPTH:
            for caller_path, job_id, job in self.callers.get(path, []):
                for outer in self.input_contexts(caller_path, depth + 1):
                    contexts += self._caller_inputs(caller_path, job_id, job, outer, declared)
        return contexts or [_Inputs(None)]

    def _caller_inputs(
        self, path: str, job_id: str, job: Any, outer: _Inputs, declared: Mapping[str, Any]
    ) -> list[_Inputs]:
        document = self.documents[path]
        contexts = []
        given = job.get("with") if isinstance(job.get("with"), dict) else {}
        for matrix, line in matrix_combinations(_matrix_of(job), outer.values, path):
            env = _LazyEnv(document, job, None, outer.values, matrix)
            context = _context(outer.values, matrix, env)
            values = dict(declared)
            for key, value in given.items():
                values[str(key)] = _evaluate_value(value, context)
            lines = {str(key): yamlio.key_line(given, key) or 1 for key in given}
            contexts.append(_Inputs(values, path, job_id, line, lines))
        return contexts

    # --- one workflow under one set of inputs ---------------------------------------------

    def read_file(self, path: str, document: Any, inputs: _Inputs) -> None:
        jobs = dict(_jobs(document))
        for job_id, job in jobs.items():
            matrix = _matrix_of(job)
            if inputs.origin_file == "":
                self.out.matrices.append((path, job_id, matrix, _label_gated(jobs, job_id)))
            for values, line in matrix_combinations(matrix, inputs.values, path):
                env = _LazyEnv(document, job, None, inputs.values, values)
                context = _context(inputs.values, values, env)
                self._read_job(path, job_id, job, context, inputs, line)

    def _read_job(
        self, path: str, job_id: str, job: Any, context: Any, inputs: _Inputs, line: int | None
    ) -> None:
        matrix = context["matrix"] or {}
        runner = matrix.get("runner_config") if isinstance(matrix, dict) else None
        if isinstance(runner, str):
            self.out.runner_configs.add(runner)
        callee = _local_callee(job)
        if callee is not None and callee in self.documents:
            return  # read with these inputs when the callee is read
        self._read_with(job, context, path, job_id, line)
        for step, reads_with, reads_run, keys in self._steps_that_may_matter(path, job):
            env = _LazyEnv(self.documents[path], job, step, inputs.values, context["matrix"], keys)
            step_context = {**context, "env": env}
            if reads_with:
                self._read_with(step, step_context, path, job_id, line, action=True)
            if reads_run:
                self._read_run(path, job_id, job, step, step_context, inputs, line)

    def _steps_that_may_matter(self, path: str, job: Any) -> list[_PlannedStep]:
        """The job's steps whose `with:` or `run:` may name a suite, a runner or a test file
        under some inputs and matrix values, each with which of the two: worked out once per
        job, not once per caller and matrix combination (sglang's nightly NPU job is read
        172 times; most steps install, build or upload), with the names its environment
        sets."""
        known = self.step_plans.get(id(job))
        if known is None or known[0] is not job:
            plan = []
            for step in job.get("steps") or []:
                if isinstance(step, dict):
                    keys = _env_keys(self.documents[path], job, step)
                    reads_with = _step_with_matters(step)
                    reads_run = self._run_may_matter(step, keys)
                    if reads_with or reads_run:
                        plan.append((step, reads_with, reads_run, keys))
            known = self.step_plans[id(job)] = (job, plan)  # the job kept: its id stays its own
        return known[1]

    def _run_may_matter(self, step: Any, env_keys: frozenset[str]) -> bool:
        """Whether `_worth_reading` can be true for the step's script in any context: it
        names a runner, or has an expression, or expands a variable the environment sets."""
        script = step.get("run")
        if not isinstance(script, str):
            return False
        named, expressions_may_name, referenced = self._script_facts(script)
        if named or expressions_may_name:
            return True
        return "$" in script and bool(referenced & env_keys)

    def _read_with(
        self,
        node: Any,
        context: Any,
        path: str,
        job_id: str,
        line: int | None,
        action: bool = False,
    ) -> None:
        """`with:` of a reusable workflow the repository does not hold, or of an action."""
        given = node.get("with")
        if not isinstance(given, dict):
            return
        call = _kl_bitexact_call(node, given)
        wanted = _wanted_inputs(call, action)
        for key, value in given.items():
            if not isinstance(value, str) or key not in wanted:
                continue  # only these can name a suite or a runner; the rest is not evaluated
            where = yamlio.key_line(given, key) or 1
            text = expressions.substitute(value, context, lambda _: shell.UNKNOWN_MARK)
            if shell.UNKNOWN_MARK in text:
                if key in SUITE_INPUTS and not action:
                    self._unresolved(path, where, value, f"the `{key}` input")
                continue
            if (key in SUITE_INPUTS and not action) or (key == "suites" and call == "names"):
                for name in sorted(set(text.split())):
                    self.out.dispatches.append(Dispatch(name, path, line or where, job_id))
            elif key == "runner_config":
                self.out.runner_configs.add(text)
            elif key == "suites" and call == "files":
                for pattern in sorted(set(text.split())):
                    self.out.globs.append(SuiteGlob(pattern, path, where))

    def _read_run(
        self,
        path: str,
        job_id: str,
        job: Any,
        step: Any,
        context: Any,
        inputs: _Inputs,
        combo_line: int | None,
    ) -> None:
        script = step.get("run")
        if not isinstance(script, str) or not self._worth_reading(script, context):
            return
        first = yamlio.script_line(step, "run") or 1
        unknown: list[str] = []

        def mark(expression: str) -> str:
            unknown.append(expression)
            return f"{shell.UNKNOWN_MARK}{len(unknown) - 1}{shell.UNKNOWN_MARK}"

        text = expressions.substitute(script, context, mark)
        self._kl_bitexact_runs(text, path, first)
        if not self._may_start_runner(text, context["env"]):
            return
        env = {}
        for key in _referenced(self._expands(text), context["env"]):
            value = context["env"][key]
            if isinstance(value, str):
                env[key] = value
            elif value is UNKNOWN:  # named by its source when it reaches a suite
                env[key] = mark(
                    f"${key} (env {key}: {_raw_env(self.documents[path], job, step, key)})"
                )
            else:
                env[key] = expressions.to_text(value)
        followed = self._follow(text, env, _working_directory(self.documents[path], job, step))
        run = _Run(script, self._time_limit(job, step, context))
        for invocation in followed.invocations:
            line = first + invocation.line
            if not self._direct_run(invocation, path, line):
                self._runner_call(invocation, unknown, path, job_id, line, inputs, combo_line, run)
        for opaque in followed.opaque:
            wrapper = _unmarked(opaque.wrapper, unknown)
            self.opaque.setdefault(wrapper, []).append((path, first + opaque.line, opaque.why))

    def _time_limit(self, job: Any, step: Any, context: Any) -> tuple[float | None, str]:
        """`_time_limit`, once per step where neither time limit is an expression (the
        context can change only those)."""
        if isinstance(step.get("timeout-minutes"), str) or isinstance(
            job.get("timeout-minutes"), str
        ):
            return _time_limit(job, step, context)
        key = (id(job), id(step))  # both held by the documents, so their ids stay theirs
        if key not in self.time_limits:
            self.time_limits[key] = _time_limit(job, step, context)
        return self.time_limits[key]

    def _follow(self, text: str, env: dict[str, str], directory: str) -> shell.Followed:
        """`shell.follow`, once per distinct script, environment and directory: a step is
        read once per caller and matrix combination, most of them alike."""
        key = (text, tuple(sorted(env.items())), directory)
        if key not in self.followed:
            self.followed[key] = shell.follow(
                text, env, directory, self.checkout, self.runners, self.markers
            )
        return self.followed[key]

    def _worth_reading(self, script: str, context: Any) -> bool:
        """Whether a step's script, before `${{ }}` is substituted, can run a suite runner,
        a registered file or kl-bitexact: its text names one, or an expression may bring a
        name in (a matrix or input value holding one, or any `env.`), or a variable it
        expands is set in `env:`. Most steps install, build or upload: they are skipped
        without evaluating anything."""
        named, expressions_may_name, referenced = self._script_facts(script)
        if named:
            return True
        if expressions_may_name and ("env." in script or self._names_in(context)):
            return True
        env = context["env"]
        if "$" not in script or not isinstance(env, _LazyEnv):
            return "$" in script
        return bool(referenced & env.raw_keys())

    def _script_facts(self, script: str) -> tuple[bool, bool, frozenset[str]]:
        """What `_worth_reading` reads from the script alone, once per distinct script (a
        step is read once per caller and matrix combination): whether it names a runner,
        a registered path or kl-bitexact; whether it has an expression; the variables it
        expands."""
        facts = self.facts.get(script)
        if facts is None:
            named = bool(self.names.search(script)) or "kl-bitexact" in script
            named = named or "kl_bitexact" in script
            facts = self.facts[script] = (named, "${{" in script, self._expands(script))
        return facts

    def _expands(self, text: str) -> frozenset[str]:
        """The variables a script expands (`$NAME`, `${NAME}`, ...), once per text."""
        found = self.expanded.get(text)
        if found is None:
            variables = shell.VARIABLE.findall(text) if "$" in text else []
            found = frozenset(plain or braced for braced, _, plain in variables)
            self.expanded[text] = found
        return found

    def _names_in(self, context: Any) -> bool:
        """Whether an input or matrix value holds a runner's or a registered path's name
        (once per job context: its steps share the same inputs and matrix)."""
        inputs, matrix = context["inputs"], context["matrix"]
        key = (id(inputs), id(matrix))
        known = self.named_contexts.get(key)
        if known is None or known[0] is not inputs or known[1] is not matrix:
            found = any(_holds(values, self.names) for values in (inputs, matrix))
            known = self.named_contexts[key] = (inputs, matrix, found)  # kept: ids stay theirs
        return known[2]

    def _may_start_runner(self, text: str, env: Mapping[str, Any]) -> bool:
        """Whether the script can start a suite runner at all: the runner's file name is in
        its text or in a variable it may expand. Only such a script is worth following
        through the shell (most steps install, build or upload)."""
        names = (*self.runner_names, *self.markers)
        if self.names.search(text):
            return True
        if "$" not in text:
            return False
        # Only a variable the script expands can bring a name in; an environment none of
        # whose keys the script names is never evaluated.
        referenced = self._expands(text)
        if isinstance(env, _LazyEnv) and not referenced & env.raw_keys():
            return False
        values = [env.get(key) for key in referenced]
        return any(isinstance(v, str) and any(name in v for name in names) for v in values)

    def _direct_run(self, invocation: shell.Invocation, path: str, line: int) -> bool:
        """Record a test file (or pytest directory) run by path; False for a runner or a
        script whose path only the run knows."""
        script = invocation.script
        for handed in _handed_tests(invocation.args):
            self.out.direct.append(DirectRun(handed, "argument", path, line))
        if script in self.runners or shell.UNKNOWN_MARK in script:
            return False
        if invocation.how == "pytest" or script.endswith(".py"):
            self.out.direct.append(DirectRun(script, invocation.how, path, line))
        return True

    def _runner_call(
        self,
        invocation: shell.Invocation,
        unknown: list[str],
        path: str,
        job_id: str,
        line: int,
        inputs: _Inputs,
        combo_line: int | None,
        run: _Run,
    ) -> None:
        script = invocation.script
        if shell.UNKNOWN_MARK in script:
            if self._may_be_runner(script.replace(shell.UNKNOWN_MARK, "")):
                self._unresolved(path, line, _unmarked(script, unknown), "the script's path")
            return
        if script not in self.runners:
            return
        arguments = _arguments(invocation.args)
        suite = arguments.get("--suite")
        if suite is None:
            return
        if shell.UNKNOWN_MARK in suite:
            self._unresolved(path, line, _unmarked(suite, unknown), "the suite")
            return
        timeout = arguments.get("--timeout-per-file")
        size = arguments.get("--auto-partition-size")
        dispatch = Dispatch(
            suite=suite,
            file=inputs.origin_file or path,
            line=self._dispatch_line(invocation, unknown, inputs, combo_line, line),
            job=inputs.origin_job or job_id,
            backend=arguments.get("--hw"),
            nightly="--nightly" in arguments,
            timeout=_seconds(timeout),
            timeout_known=timeout is None or _seconds(timeout) is not None,
            timeout_from_est="--timeout-from-est-time" in arguments,
            retry="--enable-retry" in arguments,
            retry_increase=_seconds(arguments.get("--retry-timeout-increase")),
            runner_line=line,
            runner_file=path,
            suite_literal=_written_in(suite, run.script),
            partitions=int(size) if size is not None and size.isdigit() else None,
            partitioned="--auto-partition-id" in arguments,
            limit_minutes=run.limit[0],
            limit_from=run.limit[1],
        )
        self.out.dispatches.append(dispatch)

    def _may_be_runner(self, script: str) -> bool:
        """Whether a script whose path is not fully known can be a suite runner: its name
        is a runner's, and, as an absolute path no file of the checkout ends (a container's
        own project: /root/other/tests/ci/run_suite.py), it ends with a runner's path."""
        if posixpath.basename(script) not in self.runner_names:
            return False
        if not script.startswith("/"):
            return True
        return any(script.endswith("/" + runner) for runner in self.runners)

    @staticmethod
    def _dispatch_line(
        invocation: shell.Invocation,
        unknown: list[str],
        inputs: _Inputs,
        combo_line: int | None,
        line: int,
    ) -> int:
        """Where a human would change the dispatch: the caller's matrix entry or `with:`
        key, else this job's matrix entry, else the runner command."""
        if inputs.origin_file:
            if inputs.origin_line is not None:
                return inputs.origin_line
            for name in re.findall(r"inputs\.([\w-]+)", " ".join(unknown)) or list(
                inputs.with_lines
            ):
                if name in inputs.with_lines:
                    return inputs.with_lines[name]
            return next(iter(inputs.with_lines.values()), line)
        return combo_line if combo_line is not None else line

    def _unresolved(self, path: str, line: int, expression: str, what: str) -> None:
        key = (path, line, expression)
        self.out.unresolved.setdefault(key, Unresolved(path, line, f"{what}: {expression}"))

    def _kl_bitexact_runs(self, text: str, path: str, first: int) -> None:
        if "kl-bitexact" not in text and "kl_bitexact" not in text:
            return
        for offset, line_text in enumerate(text.splitlines()):
            for match in _RUN_COMMAND.finditer(line_text):
                for token in match.group(1).split():
                    if token.endswith((".yaml", ".yml")) and shell.UNKNOWN_MARK not in token:
                        self.out.globs.append(SuiteGlob(token, path, first + offset))

    # --- targets for --fix -------------------------------------------------------------

    def _targets(self) -> Iterator[MatrixTarget]:
        by_job: dict[tuple[str, str], list[Dispatch]] = {}
        for dispatch in self.out.dispatches:
            by_job.setdefault((dispatch.file, dispatch.job), []).append(dispatch)
        seen = set()
        for path, job_id, matrix, gated in self.out.matrices:
            if (path, job_id) in seen:
                continue
            seen.add((path, job_id))
            runs = by_job.get((path, job_id), [])
            suites = {d.suite for d in runs}
            backends = frozenset(d.backend for d in runs if d.backend)
            cadence = frozenset(d.nightly for d in runs if d.nightly is not None)
            yield from _job_targets(path, job_id, matrix, gated, suites, backends, cadence)
        yield from self._suites_input_targets()

    def _suites_input_targets(self) -> Iterator[MatrixTarget]:
        for path, document in self.documents.items():
            for job_id, job in _jobs(document):
                given = job.get("with")
                if not isinstance(given, dict) or _kl_bitexact_call(job, given) != "names":
                    continue
                suites = given.get("suites")
                if isinstance(suites, str) and "${{" not in suites:
                    yield MatrixTarget(path, job_id, SUITES_INPUT, suites=frozenset(suites.split()))


def _job_targets(
    path: str,
    job_id: str,
    matrix: Any,
    gated: bool,
    dispatched: set[str],
    backends: frozenset[str],
    cadence: frozenset[bool],
) -> Iterator[MatrixTarget]:
    """A pair target when the job's stage + runner_config entries reach a runner (or an
    unreadable reusable workflow); a suite target when its `suite` axis does."""
    combos = [values for values, _ in matrix_combinations(matrix, None) if values]
    pairs = {
        (v["stage"], v["runner_config"])
        for v in combos
        if isinstance(v.get("stage"), str) and isinstance(v.get("runner_config"), str)
    }
    if pairs and dispatched & {suite_name(stage, runner) for stage, runner in pairs}:
        yield MatrixTarget(
            path,
            job_id,
            "pair",
            stages=frozenset(stage for stage, _ in pairs),
            runner_configs=frozenset(runner for _, runner in pairs),
            label_gated=gated,
            backends=backends,
            nightly=cadence,
        )
    axis = matrix.get("suite") if isinstance(matrix, dict) else None
    if isinstance(axis, list) and dispatched & {str(value) for value in axis}:
        suites = frozenset(str(value) for value in axis)
        yield MatrixTarget(
            path,
            job_id,
            "suite",
            suites=suites,
            label_gated=gated,
            backends=backends,
            nightly=cadence,
        )


# --- matrix ------------------------------------------------------------------------------


def matrix_combinations(
    matrix: Any, inputs: Mapping[str, Any] | None, path: str = ""
) -> list[tuple[dict[str, Any] | None, int | None]]:
    """(values, line) per job the matrix starts: the product of its axes minus `exclude`,
    with `include` merged in as GitHub does. No matrix: one job with no values; a matrix
    only the run knows (`${{ fromJson(...) }}`): one job with unknown values (None). A
    product GitHub would refuse to run (over MAX_MATRIX_JOBS) is an error, not expanded."""
    if matrix is None:
        return [({}, None)]
    if not isinstance(matrix, dict):
        return [(None, yamlio.node_line(matrix))]
    context = _context(inputs, {}, {})
    axes: list[tuple[str, list[Any], Any]] = []
    for key, values in matrix.items():
        if key in ("include", "exclude"):
            continue
        if isinstance(values, list):
            axes.append((str(key), [_evaluate_value(v, context) for v in values], values))
        else:  # an expression: the axis exists, its values are unknown
            axes.append((str(key), [UNKNOWN], None))
    count = math.prod(len(values) for _, values, _ in axes)
    if axes and count > MAX_MATRIX_JOBS:
        line = yamlio.node_line(matrix)
        raise ConfigError(
            f"{path}{f':{line}' if line else ''}: a job matrix of {count} combinations; "
            f"GitHub runs at most {MAX_MATRIX_JOBS} jobs per matrix, so it is not expanded",
            hint="split the matrix, or list the combinations under `include:`",
        )
    where = next((i for i, (key, _, _) in enumerate(axes) if key == "suite"), 0)
    combos: list[tuple[dict[str, Any], int | None]] = []
    if axes:
        for indexes in itertools.product(*(range(len(values)) for _, values, _ in axes)):
            combo = {key: values[i] for (key, values, _), i in zip(axes, indexes, strict=True)}
            node = axes[where][2]
            combos.append((combo, yamlio.item_line(node, indexes[where]) if node else None))
    combos = [c for c in combos if not _excluded(c[0], matrix.get("exclude"), context)]
    axis_keys = {key for key, _, _ in axes}
    original = list(combos)  # include entries extend these; they never merge with each other
    include = matrix.get("include")
    for index, entry in enumerate(include if isinstance(include, list) else []):
        if not isinstance(entry, dict):
            continue
        values = {str(k): _evaluate_value(v, context) for k, v in entry.items()}
        merged = False
        for combo, _ in original:
            if all(k not in axis_keys or combo.get(k) == v for k, v in values.items()):
                combo.update(values)
                merged = True
        if not merged:
            combos.append((dict(values), yamlio.item_line(include, index)))
    return [(combo, line) for combo, line in combos]


def _excluded(combo: dict[str, Any], exclude: Any, context: Any) -> bool:
    for entry in exclude if isinstance(exclude, list) else []:
        if isinstance(entry, dict) and all(
            combo.get(str(k)) == _evaluate_value(v, context) for k, v in entry.items()
        ):
            return True
    return False


# --- helpers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """The step a runner command is in: its script as written, GitHub's time limit."""

    script: str
    limit: tuple[float | None, str]


def _written_in(suite: str, script: str) -> bool:
    """Whether `suite` is a whole word of `script` (not part of a longer name)."""
    start = script.find(suite)
    while start >= 0:
        end = start + len(suite)
        before = script[start - 1] if start else " "
        after = script[end] if end < len(script) else " "
        if not (before.isalnum() or before in "_.-" or after.isalnum() or after in "_.-"):
            return True
        start = script.find(suite, start + 1)
    return False


def _handed_tests(args: Sequence[str]) -> list[str]:
    """Test files a program is handed to run (`run_e2e.py --test-case test/x.py`, or
    `--test-case=test/x.py`): the `.py` value of an option whose name says test; taken as
    repository paths."""
    pairs = [(arg.partition("=")[0], arg.partition("=")[2]) for arg in args if "=" in arg]
    pairs += list(itertools.pairwise(args))
    return [
        posixpath.normpath(value.removeprefix("./"))
        for option, value in pairs
        if option.startswith("--")
        and "test" in option
        and value.endswith(".py")
        and not value.startswith("-")
        and shell.UNKNOWN_MARK not in value
    ]


def _holds(value: Any, names: re.Pattern[str], depth: int = 0) -> bool:
    """Whether a (nested) value has a string `names` finds in it."""
    if isinstance(value, str):
        return names.search(value) is not None
    if isinstance(value, Mapping) and depth < 8:
        return any(_holds(item, names, depth + 1) for item in value.values())
    if isinstance(value, list) and depth < 8:
        return any(_holds(item, names, depth + 1) for item in value)
    return False


def _time_limit(job: Any, step: Any, context: Any) -> tuple[float | None, str]:
    """The minutes GitHub lets the step run: the smaller of the step's and the job's
    `timeout-minutes` (360 when the job sets none), and where that comes from. A value
    only the run knows leaves the other as a bound; both unknown: (None, "")."""
    limits = []
    for node, what in ((step, "the step's"), (job, "the job's")):
        minutes = _minutes(node.get("timeout-minutes"), context)
        line = yamlio.key_line(node, "timeout-minutes")
        if minutes is not None:
            limits.append((minutes, f"{what} timeout-minutes: {minutes:g} (line {line})"))
        elif node is job and "timeout-minutes" not in job:
            limits.append((DEFAULT_JOB_MINUTES, "the job's default timeout-minutes: 360"))
    if not limits:
        return None, ""
    minutes, where = min(limits, key=lambda item: item[0])
    if len(limits) == 2 and limits[0][0] > minutes:  # the step asks for more than the job has
        where += f"; the step's own {limits[0][0]:g} minutes end with the job"
    return minutes, where


def _minutes(value: Any, context: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        value = _evaluate_value(value, context)
        if isinstance(value, str):
            value = _seconds(value)
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _jobs(document: Any) -> Iterator[tuple[str, Any]]:
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if isinstance(jobs, dict):
        for job_id, job in jobs.items():
            if isinstance(job, dict):
                yield str(job_id), job


def _matrix_of(job: Any) -> Any:
    strategy = job.get("strategy")
    return strategy.get("matrix") if isinstance(strategy, dict) else None


def _local_callee(job: Any) -> str | None:
    uses = job.get("uses")
    if isinstance(uses, str) and uses.startswith("./"):
        return uses.removeprefix("./").split("@")[0]
    return None


def _triggers(document: Any) -> set[str]:
    # YAML 1.1 readers may turn the key `on` into True.
    on = document.get("on", document.get(True))
    if isinstance(on, str):
        return {on}
    if isinstance(on, list):
        return {str(item) for item in on}
    if isinstance(on, dict):
        return {str(key) for key in on}
    return set()


def _triggered_directly(document: Any) -> bool:
    triggers = _triggers(document)
    return not triggers or bool(triggers - {"workflow_call"})


def _declared_inputs(document: Any) -> dict[str, Any]:
    """Declared inputs with their defaults (UNKNOWN without one: the dispatcher decides)."""
    on = document.get("on", document.get(True))
    declared: dict[str, Any] = {}
    if not isinstance(on, dict):
        return declared
    for trigger in ("workflow_call", "workflow_dispatch"):
        section = on.get(trigger)
        inputs = section.get("inputs") if isinstance(section, dict) else None
        if isinstance(inputs, dict):
            for name, spec in inputs.items():
                has_default = isinstance(spec, dict) and "default" in spec
                declared.setdefault(str(name), spec["default"] if has_default else UNKNOWN)
    return declared


def _context(inputs: Mapping[str, Any] | None, matrix: Any, env: Mapping[str, Any]) -> Any:
    return {"inputs": inputs, "matrix": matrix, "env": env}


# A step worth reading under some context: the step, whether its `with:` and its `run:`
# may name a suite, a runner or a test file, and the names its environment sets.
_PlannedStep = tuple[Any, bool, bool, frozenset[str]]


def _wanted_inputs(call: str | None, action: bool) -> tuple[str, ...]:
    """The `with:` keys that can name a suite or a runner: of an action (a step) or of a
    reusable workflow the repository does not hold (a job); `call`: `_kl_bitexact_call`."""
    return (
        "runner_config",
        *(SUITE_INPUTS if not action else ()),
        *(("suites",) if call else ()),
    )


def _step_with_matters(step: Any) -> bool:
    """Whether `_read_with` reads anything of the step's `with:`."""
    given = step.get("with")
    if not isinstance(given, dict):
        return False
    wanted = _wanted_inputs(_kl_bitexact_call(step, given), action=True)
    return any(isinstance(value, str) and key in wanted for key, value in given.items())


def _env_keys(document: Any, job: Any, step: Any) -> frozenset[str]:
    """The names the workflow's, job's and step's `env:` set (`_LazyEnv.raw_keys`)."""
    return _LazyEnv(document, job, step, None, None).raw_keys()


class _LazyEnv(Mapping[str, Any]):
    """A job's or step's `env` context: workflow, job, then step `env:` (inner levels
    win), each value evaluated the first time an expression or the shell reads it (most
    are never read), in the context of the levels around it (the workflow level sees no
    matrix)."""

    def __init__(
        self,
        document: Any,
        job: Any,
        step: Any,
        inputs: Mapping[str, Any] | None,
        matrix: Any,
        keys: frozenset[str] | None = None,  # `raw_keys`, when already known
    ) -> None:
        self._levels = (document, job, step)
        self._inputs = inputs
        self._matrix = matrix
        self._values: dict[str, Any] = {}
        self._keys = keys

    def raw_keys(self) -> frozenset[str]:
        """The names the environment sets, without evaluating a value."""
        if self._keys is None:
            keys: set[str] = set()
            for node in self._levels:
                values = node.get("env") if isinstance(node, dict) else None
                if isinstance(values, dict):
                    keys.update(str(key) for key in values)
            self._keys = frozenset(keys)
        return self._keys

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            self._values[key] = self._evaluate(key)
        return self._values[key]

    def _evaluate(self, key: str) -> Any:
        for depth in (2, 1, 0):
            node = self._levels[depth]
            values = node.get("env") if isinstance(node, dict) else None
            if isinstance(values, dict) and key in values:
                document, job = (*self._levels[:depth], None, None)[:2]
                env = _LazyEnv(document, job, None, self._inputs, self._matrix)
                matrix = None if depth == 0 else self._matrix
                return _evaluate_value(values[key], _context(self._inputs, matrix, env))
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.raw_keys()))

    def __len__(self) -> int:
        return len(self.raw_keys())


def _referenced(named: frozenset[str], env: Mapping[str, Any]) -> list[str]:
    """The environment's names among those a script expands."""
    keys = env.raw_keys() if isinstance(env, _LazyEnv) else set(env)
    return sorted(named & keys)


def _raw_env(document: Any, job: Any, step: Any, key: str) -> str:
    """The text of `env.key` at the innermost level that sets it."""
    for node in (step, job, document):
        values = node.get("env") if isinstance(node, dict) else None
        if isinstance(values, dict) and key in values:
            return str(values[key])
    return "?"


def _evaluate_value(value: Any, context: Any) -> Any:
    """A YAML value as the runner sees it: expressions evaluated (UNKNOWN if any is)."""
    if not isinstance(value, str):
        return value
    whole = expressions.EXPRESSION.fullmatch(value.strip())
    if whole and value.count("${{") == 1:
        return expressions.evaluate(whole.group(1), context)
    unknown: list[str] = []

    def keep(expression: str) -> str:
        unknown.append(expression)
        return expression

    text = expressions.substitute(value, context, keep)
    return UNKNOWN if unknown else text


def _working_directory(document: Any, job: Any, step: Any) -> str:
    directory = step.get("working-directory")
    if isinstance(directory, str):
        return posixpath.normpath(directory.removeprefix("./"))
    for node in (job, document):
        defaults = node.get("defaults")
        run = defaults.get("run") if isinstance(defaults, dict) else None
        if isinstance(run, dict) and isinstance(run.get("working-directory"), str):
            return posixpath.normpath(str(run["working-directory"]).removeprefix("./"))
    return ""


def _label_gated(jobs: Mapping[str, Any], job_id: str) -> bool:
    """Whether the job (or a job it needs) runs only when a pull request carries a label:
    its `if:` reads labels, or a gate job it needs is called with `require-*` inputs."""
    pending, seen = [job_id], set()
    while pending:
        current = pending.pop()
        if current in seen or current not in jobs:
            continue
        seen.add(current)
        job = jobs[current]
        if "label" in str(job.get("if", "")).lower():
            return True
        given = job.get("with")
        if isinstance(given, dict) and any(
            str(key).startswith("require-") and value is True for key, value in given.items()
        ):
            return True
        needs = job.get("needs")
        pending += [needs] if isinstance(needs, str) else [str(n) for n in needs or []]
    return False


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


def _arguments(args: Sequence[str]) -> dict[str, str]:
    """`--name value`, `--name=value` and bare flags (value "")."""
    found: dict[str, str] = {}
    index = 0
    while index < len(args):
        word = args[index]
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if equals:
                found[name] = value
            elif index + 1 < len(args) and not args[index + 1].startswith("--"):
                found[name] = args[index + 1]
                index += 1
            else:
                found[name] = ""
        index += 1
    return found


def _seconds(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _unmarked(text: str, unknown: list[str]) -> str:
    """`text` with each marker replaced by the expression it stands for."""
    restored = _MARKED.sub(lambda m: unknown[int(m.group(1))], text)
    return restored.replace(shell.UNKNOWN_MARK, "")

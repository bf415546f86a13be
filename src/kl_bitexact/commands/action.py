"""`kl-bitexact action`: the step action.yml runs; reads INPUT_* variables, not arguments.

`report`, `publish`, `lint-ci`, `shard` and `prove-plan` run in this process, on values:
their options built from the inputs (the `args` input parsed over them by the command's own
parser), their results (the comment id, the findings, the matrices) read as values. `run`
(and `pytest`, and `explore`) run in a child process whose environment holds no action input and no
token: they execute suite commands from the PR.
For `run` that is not enough: the PR's code can read the environment this process was
started with (`/proc/<pid>/environ` of an ancestor), so before anything runs this process
restarts itself without credentials or INPUT_* variables, its inputs handed over through
an unlinked file instead (issue 14, case 7).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kl_bitexact.action import outputs, shards, trust
from kl_bitexact.action.inputs import FETCH_BASELINE, ActionInputs, Prove, env_name, read_inputs
from kl_bitexact.commands import Command, values_file
from kl_bitexact.errors import ConfigError, ExitCode, FatalError, Interrupted
from kl_bitexact.publish.client import pr_from_event, read_event
from kl_bitexact.results import commit
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results_model
from kl_bitexact.run import clean_env
from kl_bitexact.untrusted import escape
from kl_bitexact.untrusted.jsonfile import read_bounded, replace_text

if TYPE_CHECKING:
    from kl_bitexact.commands import publish, pytest_cmd, report_work, run, shard
    from kl_bitexact.compare.history import History

_HINT = "fix the `with:` of the kl-bitexact step in your workflow"


@dataclass(frozen=True)
class StepResult:
    exit_code: int
    results: tuple[Path, ...] = ()
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


class _StepFailed(Exception):
    """A command run in process failed: the step's outputs as far as it got, and the error
    the command's own process would have ended with (the CLI reports it, with its code)."""

    def __init__(self, step: StepResult, error: Exception | Interrupted) -> None:
        super().__init__(str(error))
        self.step, self.error = step, error


# Commands that execute the repository's code: the step restarts clean before them.
RUNS_REPOSITORY_CODE = ("run",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments: action.yml passes its inputs as INPUT_* environment variables."""
    # The restarted step (see the module's docstring) reads its inputs from this file.
    parser.add_argument("--inputs-fd", type=int, help=argparse.SUPPRESS)


def handle(args: argparse.Namespace) -> int:
    inputs: ActionInputs | None = None
    try:
        variables = _input_variables(args.inputs_fd)
        inputs = read_inputs(variables, STEPS)
        if inputs.command in RUNS_REPOSITORY_CODE:
            _restart_clean(variables)
        step = STEPS[inputs.command](inputs)
    except FatalError as error:
        _finish(inputs.command if inputs else "?", StepResult(int(error.exit_code)))
        raise
    except _StepFailed as failed:
        _finish(inputs.command if inputs else "?", failed.step)
        raise failed.error from None
    except Interrupted as stop:  # a cancelled job: `conclusion` says cancelled
        _finish(inputs.command if inputs else "?", StepResult(stop.exit_code))
        raise
    _finish(inputs.command, step)
    return step.exit_code


def _input_variables(inputs_fd: int | None) -> Mapping[str, str]:
    """The INPUT_* variables: the environment's, or those the clean restart handed over."""
    if inputs_fd is None:
        return os.environ
    with os.fdopen(inputs_fd, encoding="utf-8") as handed_over:
        variables: dict[str, str] = json.load(handed_over)
    return variables


def _restart_clean(variables: Mapping[str, str]) -> None:
    """exec this step again without credentials or INPUT_* variables in its environment;
    the inputs (never the token: `run` gets none) go through an unlinked temporary file."""
    if not clean_env.removed(os.environ):
        return  # already clean: the restarted process, or a step with nothing to hide
    clean_env.warn(os.environ)
    inputs = {
        name: value
        for name, value in variables.items()
        if name.startswith(clean_env.INPUT_PREFIX) and name != env_name("github-token")
    }
    handover = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - lives until exec
    json.dump(inputs, handover)
    handover.flush()
    handover.seek(0)
    os.set_inheritable(handover.fileno(), True)
    clean_env.restart_clean(["action", "--inputs-fd", str(handover.fileno())], os.environ)


def _finish(command: str, step: StepResult) -> None:
    summary_json = outputs.summary_json(
        command, step.exit_code, step.results, step.outputs.get("comment-url", "")
    )
    values = {"conclusion": outputs.conclusion(step.exit_code), "summary-json": summary_json}
    outputs.append(os.environ.get("GITHUB_OUTPUT"), outputs.format_outputs(values | step.outputs))
    outputs.append(os.environ.get("GITHUB_STEP_SUMMARY"), step.summary)


def _in_child(command: Command, options: object) -> int:
    """`command`'s work with `options` in a child process, the inputs and the token kept
    out of its environment: the options travel as a file of values
    (commands/values_file.py), never as a command line to parse again."""
    env = _step_env_without_inputs()
    print(escape.terminal(values_file.describe(command.name, options), 4000), flush=True)
    with values_file.written(command.name, options) as path:
        child = subprocess.Popen(
            [sys.executable, "-m", "kl_bitexact", values_file.FLAG, str(path)], env=env
        )
        try:
            return child.wait()
        except BaseException as error:
            _stop_child(child, error)
            raise


# How long a child told to stop may take to stop its servers (the teardown ladder) and
# write what finished before it is killed.
CHILD_STOP_S = 60.0


def _stop_child(child: subprocess.Popen[bytes], error: BaseException) -> None:
    """A stop signal is passed on, so that the child stops as it would on its own: its
    servers stopped, what finished written (subprocess.run would SIGKILL it, losing the
    report); anything else kills it."""
    if isinstance(error, Interrupted):
        child.send_signal(error.signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=CHILD_STOP_S)
            return
    child.kill()
    child.wait()


# The job summary allows 1 MiB; a report.md is at most a 65,536-character comment.
MAX_REPORT_BYTES = 1024 * 1024


def _read_text(path: Path) -> str:
    """`path`'s text for the job summary, or "" when it is missing or not a plain file
    (the run, the PR's code, could leave a link or a FIFO there: issue 14, case 9)."""
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        raw = read_bounded(path, what="report", max_bytes=MAX_REPORT_BYTES, follow_symlinks=False)
    except ConfigError as error:
        print(f"::warning title=kl-bitexact::{escape.command_data(error.message)}", flush=True)
        return ""
    return raw.decode("utf-8", "replace")


# --- one function per command ---------------------------------------------------------


def run_step(inputs: ActionInputs) -> StepResult:
    """Suite files with `kl-bitexact run`, registered Python test files (.py) with
    `kl-bitexact pytest`; both kinds at once: one results.json in results-dir."""
    from kl_bitexact.commands import pytest_cmd, run

    files = expand_suites(inputs.suites)
    tests = [file for file in files if file.endswith(".py")]
    suites = [file for file in files if not file.endswith(".py")]
    try:
        if not tests:
            code = _in_child(run.COMMAND, run_options(inputs, suites))
        elif not suites:
            code = _in_child(pytest_cmd.COMMAND, pytest_options(inputs, tests, inputs.results_dir))
        else:
            code = _run_both(inputs, suites, tests)
    except Interrupted as stop:  # a cancelled job: the outputs say so, with what finished
        raise _StepFailed(_ran(inputs, stop.exit_code), stop) from None
    return _ran(inputs, code)


def _ran(inputs: ActionInputs, code: int) -> StepResult:
    """The run step's outputs: results.json and report.md as the run left them."""
    results_path = inputs.results_dir / "results.json"
    written = (results_path,) if results_path.is_file() else ()
    return StepResult(
        code,
        written,
        {"results-path": str(results_path) if written else ""},
        _read_text(inputs.results_dir / "report.md"),
    )


def _run_both(inputs: ActionInputs, suites: Sequence[str], tests: Sequence[str]) -> int:
    """`run` into results-dir, `pytest` beside it, then one results.json of both (its
    junit.xml and logs moved in): the artifact a run job uploads is one directory."""
    from kl_bitexact.commands import pytest_cmd, run

    run_code = _in_child(run.COMMAND, run_options(inputs, suites))
    part = Path(tempfile.mkdtemp(prefix="kl-bitexact-pytest-"))
    pytest_code = _in_child(pytest_cmd.COMMAND, pytest_options(inputs, tests, part))
    out = inputs.results_dir
    out.mkdir(parents=True, exist_ok=True)
    found = [path for path in (out / "results.json", part / "results.json") if path.is_file()]
    if found:
        merged = results_io.merge([(str(path), results_io.load(path)) for path in found])
        results_io.write_atomic(merged, out / "results.json")
        _write_report(merged, out / "report.md")
    _bring_over(part, out)
    shutil.rmtree(part, ignore_errors=True)
    return _worst(run_code, pytest_code)


def run_options(inputs: ActionInputs, suites: Sequence[str]) -> run.Options:
    """`run`'s options from the inputs (`_parsed`: the `args` input's words are `run`'s,
    suite files among them run after the `suites` input's)."""
    from kl_bitexact.commands import run

    values: dict[str, Any] = {"out": inputs.results_dir, "exact": inputs.exact}
    values["fail_on"] = inputs.fail_on  # the run step's exit code: the publish step's verdict
    if inputs.base_url:
        values["base_url"] = inputs.base_url
    if inputs.repeat:
        values["repeat"] = inputs.repeat
    if inputs.gate is not None:
        values["gate"] = inputs.gate.value
    if inputs.prove is not Prove.OFF:
        values["prove_base"] = inputs.base_path
    given = run.Options.from_args(_parsed(run.COMMAND, values, inputs.args))
    return dataclasses.replace(given, suites=(*map(Path, suites), *given.suites))


def pytest_options(inputs: ActionInputs, tests: Sequence[str], out: Path) -> pytest_cmd.Options:
    """`pytest`'s options from the inputs: the registered test files, under the runner's
    interpreter (the `python` input: the engine is installed there, not in the action's
    environment). The `args` input is `run`'s, not pytest's."""
    from kl_bitexact.commands import pytest_cmd

    proving = inputs.prove is not Prove.OFF
    return pytest_cmd.Options(
        pytest_args=tuple(tests),
        out=out,
        python=inputs.python,
        exact=inputs.exact,
        prove_base=inputs.base_path if proving else None,
    )


# pytest's JUnit XML holds every test's output; its log and the servers' logs are of a size.
MAX_PART_BYTES = 256 * 1024 * 1024


def _bring_over(part: Path, out: Path) -> None:
    """pytest's junit.xml and logs/ into results-dir, regular files only: each read without
    following a link and written as a new file, never through a link (PR code ran in both
    runs and may have left links in either directory: issue 14, case 9)."""
    sources = [part / "junit.xml", *sorted((part / "logs").glob("*"))]
    for source in sources:
        target = out / source.relative_to(part)
        if source.is_symlink() or not source.is_file() or target.parent.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        raw = read_bounded(
            source, what="pytest output", max_bytes=MAX_PART_BYTES, follow_symlinks=False
        )
        replace_text(target, raw.decode("utf-8", "replace"))


def _worst(*codes: int) -> int:
    """One exit code for several runs: any that could not run (2, 130, ...) first, else
    a failed gate, else passed."""
    other = [code for code in codes if code not in (ExitCode.GATE_PASSED, ExitCode.GATE_FAILED)]
    return other[0] if other else max(codes)


def _write_report(results: results_model.Results, path: Path) -> None:
    from kl_bitexact.compare.comparison import compare
    from kl_bitexact.report import render

    replace_text(path, render.comment(compare(results, None)))


def report_step(inputs: ActionInputs, history: History | None = None) -> StepResult:
    """`report` in process; `history`: the branch's, when the publish step fetched it."""
    from kl_bitexact.commands import report_work

    inputs = _existing_findings(inputs)
    files = gather_results(inputs)
    out = inputs.results_dir / "comment.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    print(f"kl-bitexact report ({len(files)} results file(s); in process)", flush=True)
    outputs = {"results-path": _lines(files)}
    with _in_process(StepResult(0, files, outputs)):
        options = report_options(inputs, files, out, summary, proof_files(inputs))
        comparison = report_work.report(dataclasses.replace(options, history=history))
    return StepResult(int(comparison.decision.exit_code), files, outputs)


def report_options(
    inputs: ActionInputs,
    files: Sequence[Path],
    out: Path,
    summary: str | None,
    proof: Sequence[Path],
) -> report_work.Options:
    """`report`'s options from the inputs (`_parsed`): the comment Markdown to `out`, the job
    summary, the gate; no GitHub calls, so a baseline to fetch is left out."""
    from kl_bitexact.commands import report, report_work

    values = {"results": list(files), "out": out, **_gate_values(inputs, proof)}
    if inputs.baseline and inputs.baseline != FETCH_BASELINE:
        values["baseline"] = Path(inputs.baseline)
    if summary:
        values["job_summary"] = Path(summary)
    return report_work.Options.from_args(_parsed(report.COMMAND, values, inputs.args))


@contextlib.contextmanager
def _in_process(partial: StepResult) -> Iterator[None]:
    """A command called in process that fails: the step's outputs as far as it got (with
    the code the command's process would have ended with), then the CLI's report of it."""
    try:
        yield
    except Exception as error:
        raise _StepFailed(
            dataclasses.replace(partial, exit_code=_exit_code_of(error)), error
        ) from None


def _exit_code_of(error: Exception) -> int:
    """The code the command's own process would have ended with."""
    return int(error.exit_code if isinstance(error, FatalError) else ExitCode.INTERNAL_ERROR)


def publish_step(inputs: ActionInputs) -> StepResult:
    if not inputs.comment:  # no pull request (a push): the gate and the job summary only
        return report_step(inputs, _branch_history(inputs))
    from kl_bitexact.commands import publish  # PyGithub and requests: this step only

    inputs = _existing_findings(inputs)
    files = gather_results(inputs)
    print(f"kl-bitexact publish ({len(files)} results file(s); in process)", flush=True)
    with _in_process(StepResult(0, files, {"results-path": _lines(files), "comment-url": ""})):
        options = publish_options(inputs, files, proof_files(inputs))
        published = publish.publish(options, _publish_env(inputs))
    print(published.line(), flush=True)
    url = comment_url(published.comment.comment_id, os.environ)
    return StepResult(
        published.exit_code, files, {"results-path": _lines(files), "comment-url": url}
    )


def _branch_history(inputs: ActionInputs) -> History | None:
    """On a run with no pull request (a push to main), with `baseline: fetch` and
    `history-runs`: the branch's own history, fetched as publish fetches a pull request's
    base branch's (`publish.branch_history`: the same runs, bounds and cache, which the
    workflow then saves for the next pull request), so the gate and the job summary tell
    new failures from known ones. Never the step's failure: a history that cannot be had
    is a notice, and the step reports as it would without one."""
    if inputs.baseline != FETCH_BASELINE or not inputs.history_runs:
        return None
    if not inputs.github_token:
        _history_notice("the step has no `github-token`")
        return None
    from kl_bitexact.commands import publish  # PyGithub and requests: only to fetch

    try:
        options = publish_options(inputs, (), ())
        history = publish.branch_history(options, _publish_env(inputs))
    except FatalError as error:
        _history_notice(error.message)
        return None
    except OSError as error:  # its cache could not be written
        _history_notice(f"writing its cache: {error}")
        return None
    if not history.runs:  # GitHub refused, or no run could be had: the notes say why
        _history_notice("; ".join(history.notes) or "no runs")
    return history


def _history_notice(why: str) -> None:
    text = escape.command_data(f"the branch's history was not fetched: {why}")
    print(f"::notice title=kl-bitexact::{text}", flush=True)


def publish_options(
    inputs: ActionInputs, files: Sequence[Path], proof: Sequence[Path]
) -> publish.Options:
    """`publish`'s options from the inputs (`_parsed`)."""
    from kl_bitexact.commands import publish

    values = _publish_values(inputs, files, proof)
    return publish.Options.from_args(_parsed(publish.COMMAND, values, inputs.args))


def _publish_values(
    inputs: ActionInputs, files: Sequence[Path], proof: Sequence[Path]
) -> dict[str, Any]:
    values = {"results": list(files), "annotations": True, **_gate_values(inputs, proof)}
    if inputs.baseline == FETCH_BASELINE:
        values["fetch_baseline"] = True
        if inputs.history_runs:  # the same runs' artifacts, the last N of them
            values |= {"fetch_history": True, "history_runs": inputs.history_runs}
    elif inputs.baseline:
        values["baseline"] = Path(inputs.baseline)
    return values


def _gate_values(inputs: ActionInputs, proof: Sequence[Path]) -> dict[str, Any]:
    """What `report` and `publish` both take from the inputs: the shards, findings and
    proofs to show, and the policy."""
    values: dict[str, Any] = {
        "expected_shards": inputs.expected_shards,
        "fail_on": inputs.fail_on,
        "strict": inputs.strict,
    }
    if inputs.findings:
        values["findings"] = Path(inputs.findings)
    if inputs.prove is not Prove.OFF:
        values |= {
            "proof": list(proof),
            "expected_proofs": inputs.expected_proofs,
            "proof_strict": inputs.prove is Prove.STRICT,
        }
    return values


def _parsed(
    command: Command, values: Mapping[str, Any], words: Sequence[str]
) -> argparse.Namespace:
    """A command's options from typed values: they are the defaults of the command's own
    parser, which then parses the `args` input's words over them, as words appended to a
    command line would be (a value given there wins, a repeatable option adds to the
    inputs'). A word the command does not take is the input's error."""
    parser = argparse.ArgumentParser(
        prog=f"kl-bitexact {command.name}", add_help=False, exit_on_error=False
    )
    command.add_arguments(parser)
    actions = {action.dest: action for action in parser._actions}
    unknown = sorted(set(values) - set(actions))
    assert not unknown, f"no such option of {command.name}: {unknown}"
    for dest in values:
        actions[dest].required = False  # given here
    parser.set_defaults(**values)
    try:
        args, extra = parser.parse_known_args(list(words))
    except argparse.ArgumentError as error:
        raise ConfigError(f"action input `args`: {error}", hint=_HINT) from None
    if extra:
        raise ConfigError(
            f"action input `args`: {command.name} does not take {' '.join(extra)}", hint=_HINT
        )
    return args


def _publish_env(inputs: ActionInputs) -> dict[str, str]:
    """What `publish` reads: the step's environment without the action's inputs, and the
    `github-token` input as GITHUB_TOKEN (the step's own, if any, is not publish's)."""
    env = _step_env_without_inputs()
    if inputs.github_token:
        env["GITHUB_TOKEN"] = inputs.github_token
    return env


def _step_env_without_inputs() -> dict[str, str]:
    """The step's environment without the action's inputs or its own GITHUB_TOKEN: what a
    command the step calls starts from (the token, where one is due, is the input's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(clean_env.INPUT_PREFIX)}
    env.pop("GITHUB_TOKEN", None)
    return env


def lint_ci_step(inputs: ActionInputs) -> StepResult:
    """The findings, once: as annotations, and as JSON for the comment (`publish
    --findings`) when the `findings` input names a file."""
    from kl_bitexact.commands import lint_ci
    from kl_bitexact.registry import findings

    print("kl-bitexact lint-ci (in process)", flush=True)
    try:
        options = lint_ci.Options.from_args(_parsed(lint_ci.COMMAND, {}, inputs.args))
        found = lint_ci.lint_ci(options)
    except Exception as error:
        code = _exit_code_of(error)
        raise _StepFailed(StepResult(code, summary=_lint_summary(code)), error) from None
    if inputs.findings:
        Path(inputs.findings).parent.mkdir(parents=True, exist_ok=True)
        Path(inputs.findings).write_text(findings.to_json(found), encoding="utf-8")
    sys.stdout.write(findings.to_github(found))
    code = lint_ci.exit_code(found)
    return StepResult(code, summary=_lint_summary(code))


def _lint_summary(code: int) -> str:
    verdict = "no findings" if code == 0 else f"findings or errors (exit {code}); see annotations"
    return f"kl-bitexact lint-ci: {verdict}\n"


def shard_step(inputs: ActionInputs) -> StepResult:
    if not inputs.suites:
        raise ConfigError("action input `suites`: `command: shard` needs suite names", hint=_HINT)
    from kl_bitexact.commands import shard

    include: list[dict[str, Any]] = []
    measured = readable_durations(inputs.durations)
    for suite in inputs.suites:
        print(f"kl-bitexact shard --suite {suite} (in process)", flush=True)
        planned = shard.plan(shard_options(inputs, suite, measured))
        print("\n".join(planned.summary), file=sys.stderr, flush=True)
        include += label_shards(suite, planned.matrix["include"])
    matrix = json.dumps({"include": include}, separators=(",", ":"))
    print(matrix)
    return StepResult(0, outputs={"matrix": matrix})


def explore_step(inputs: ActionInputs) -> StepResult:
    """`kl-bitexact explore` of one suite file's server into results-dir (the `args` input:
    explore's own options, e.g. `--budget 30m --seed 7`), in the token-free child process
    (it launches the suite's command); its summary.md becomes the job summary."""
    from kl_bitexact.commands import explore

    files = expand_suites(inputs.suites)
    if len(files) != 1 or files[0].endswith(".py"):
        raise ConfigError(
            "action input `suites`: `command: explore` needs exactly one suite file (YAML), "
            f"got {len(files)}: {' '.join(files) or 'none'}",
            hint=_HINT,
        )
    values = {"suite": Path(files[0]), "out": inputs.results_dir}
    options = explore.Options.from_args(_parsed(explore.COMMAND, values, inputs.args))
    try:
        code = _in_child(explore.COMMAND, options)
    except Interrupted as stop:  # a cancelled job: what was found is in results-dir
        summary = _read_text(inputs.results_dir / "summary.md")
        raise _StepFailed(StepResult(stop.exit_code, summary=summary), stop) from None
    results = inputs.results_dir / "results.json"
    outputs_ = {"results-path": str(results) if results.is_file() else ""}
    return StepResult(code, outputs=outputs_, summary=_read_text(inputs.results_dir / "summary.md"))


def prove_plan_step(inputs: ActionInputs) -> StepResult:
    """The proof matrix (`proof-matrix` output): suites with tests the PR adds or changes."""
    if not inputs.suites:
        raise ConfigError("action input `suites`: `command: prove-plan` needs suite names")
    from kl_bitexact.commands import prove_plan

    print("kl-bitexact prove-plan (in process)", flush=True)
    values = {"base": inputs.base_path, "suite": list(inputs.suites)}
    planned = prove_plan.plan(
        prove_plan.Options.from_args(_parsed(prove_plan.COMMAND, values, inputs.args))
    )
    for line in planned.lines():
        print(line, file=sys.stderr, flush=True)
    matrix = json.dumps(planned.matrix(), separators=(",", ":"))
    print(matrix)
    any_test = "true" if planned.include else "false"
    return StepResult(0, outputs={"proof-matrix": matrix, "proof-needed": any_test})


def shard_options(inputs: ActionInputs, suite: str, durations: Sequence[Path]) -> shard.Options:
    """`shard`'s options for one suite (`_parsed`); `durations`: the readable results files
    the `durations` input named. The action plans GitHub matrices only."""
    from kl_bitexact.commands import shard

    values: dict[str, Any] = {"suite": suite, "durations": list(durations)}
    if inputs.partitions:
        values["partitions"] = inputs.partitions
    if inputs.shard_timeout:
        values["timeout"] = inputs.shard_timeout
    options = shard.Options.from_args(_parsed(shard.COMMAND, values, inputs.args))
    if options.format != "matrix":
        raise ConfigError(
            f"action input `args`: --format {options.format}: the shard step plans the "
            "GitHub matrix (run `kl-bitexact shard` itself for other formats)",
            hint=_HINT,
        )
    return options


def trust_step(inputs: ActionInputs) -> StepResult:
    """May this event run the PR's code, and on which commit (`head-sha`: what every
    checkout of the PR's code uses, and `publish` marks). An event that names no commit
    to test is refused by name (issue 30)."""
    event_path = os.environ.get("GITHUB_EVENT_PATH", "")
    event = read_event(event_path or None)
    event_name = os.environ.get("GITHUB_EVENT_NAME", "")
    head = commit.event_head(event_name, event, os.environ.get("GITHUB_SHA"))
    verdict = trust.decide(
        event_name, event, os.environ.get("GITHUB_REPOSITORY", ""), inputs.trusted_label
    )
    print(f"trusted={str(verdict.trusted).lower()}: {verdict.reason}; commit {head}")
    values = {
        "trusted": str(verdict.trusted).lower(),
        "trust-reason": verdict.reason,
        "head-sha": head,
    }
    return StepResult(0, outputs=values, summary=f"kl-bitexact trust: {verdict.reason}\n")


# The action's one list of commands (the `command` input is checked against it, in this
# order): each named as the kl-bitexact command it runs (tests/action checks they are
# cli.COMMANDS'), but `trust`, the action's own (it only reads the event).
STEPS: dict[str, Callable[[ActionInputs], StepResult]] = {
    "run": run_step,
    "publish": publish_step,
    "report": report_step,
    "lint-ci": lint_ci_step,
    "shard": shard_step,
    "trust": trust_step,
    "prove-plan": prove_plan_step,
    "explore": explore_step,
}


# --- helpers ----------------------------------------------------------------------------


# Durations files the shard step reads at most (the history keeps at most 100 runs).
MAX_DURATIONS_FILES = 200


def readable_durations(patterns: Sequence[str]) -> list[Path]:
    """The `durations` input's files that read as results. They may come from a cache no
    one vouches for (the history's, restored by actions/cache): one that does not read is
    left out with a warning, never the plan's failure; durations only balance shards. A
    pattern matching nothing is no error either (the first run has no history)."""
    found = sorted({p for pattern in patterns for p in glob.glob(pattern, recursive=True)})
    readable: list[Path] = []
    for name in found[-MAX_DURATIONS_FILES:]:
        try:
            results_io.load(Path(name))
        except ConfigError as error:
            message = escape.command_data(f"durations: {name} left out: {error.message}")
            print(f"::warning title=kl-bitexact::{message}", flush=True)
            continue
        readable.append(Path(name))
    return readable


def expand_suites(patterns: Sequence[str]) -> list[str]:
    """Expand globs (in Python, so no shell ever sees the input); a glob matching nothing is
    an error, a plain path is passed on for `run` to check."""
    files: list[str] = []
    for pattern in patterns:
        if not glob.has_magic(pattern):
            files.append(pattern)
            continue
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise ConfigError(
                f"action input `suites`: {pattern!r} matches no file in {Path.cwd()}", hint=_HINT
            )
        files += matches
    return files


def gather_results(inputs: ActionInputs) -> tuple[Path, ...]:
    """Every shard's results.json under results-dir. An expected shard missing among them is
    annotated here and made an `error` test by `report`/`publish --expected-shards`."""
    found = shards.results_files(inputs.results_dir)
    missing = shards.missing_shards(found, inputs.expected_shards)
    for name in missing:
        print(f"::error title=kl-bitexact::shard {name} uploaded no results", flush=True)
    if found or missing:
        return tuple(found)
    if not inputs.findings:
        raise ConfigError(
            f"action input `results-dir`: no results.json under {inputs.results_dir}",
            hint="download the run jobs' results artifacts into results-dir first",
        )
    # No shard ran (the plan job stopped on registration errors): an empty run, so the
    # comment still shows the findings and the gate says that nothing ran.
    print("::warning title=kl-bitexact::no shard reported results", flush=True)
    return (_write_empty_run(),)


def _write_empty_run() -> Path:
    """Written outside results-dir, so a later look at results-dir never finds it."""
    path = Path(tempfile.mkdtemp(prefix="kl-bitexact-stand-ins-")) / "no-shard-ran" / "results.json"
    results_io.write_atomic(results_model.Results(), path)
    return path


def proof_files(inputs: ActionInputs) -> tuple[Path, ...]:
    """The proof runs' results under proof-dir (one per proof job); none when prove is off
    or no test needed proving."""
    if inputs.prove is Prove.OFF or not inputs.proof_dir.is_dir():
        return ()
    return tuple(shards.results_files(inputs.proof_dir))


def label_shards(suite: str, include: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tag `shard`'s matrix entries with their suite and a name unique across suites."""
    return [{**entry, "suite": suite, "name": f"{suite}-{entry['partition']}"} for entry in include]


def _existing_findings(inputs: ActionInputs) -> ActionInputs:
    """A findings file that never arrived (lint did not run) is noted, not fatal."""
    if inputs.findings and not Path(inputs.findings).is_file():
        print(f"::warning title=kl-bitexact::no lint findings at {inputs.findings}", flush=True)
        return dataclasses.replace(inputs, findings="")
    return inputs


def comment_url(comment_id: int, environ: Mapping[str, str]) -> str:
    """The sticky comment's web URL, from its id (publish's result) and the event."""
    number = pr_from_event(environ.get("GITHUB_EVENT_PATH"))
    if number is None:
        return ""
    server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repository = environ.get("GITHUB_REPOSITORY", "")
    return f"{server}/{repository}/pull/{number}#issuecomment-{comment_id}"


def _lines(paths: Sequence[Path]) -> str:
    return "\n".join(map(str, paths))


COMMAND = Command(
    name="action",
    summary="the GitHub Action's step (reads INPUT_* variables; used by action.yml)",
    description="Run one kl-bitexact command as the composite action does: inputs from "
    "INPUT_* environment variables, step outputs to $GITHUB_OUTPUT, the job summary to "
    "$GITHUB_STEP_SUMMARY, and the command's exit code.",
    add_arguments=add_arguments,
    handler=handle,
)

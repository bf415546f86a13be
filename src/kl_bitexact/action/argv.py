"""Command lines for each action `command`, from the inputs (pure: no files, no processes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.action.inputs import ActionInputs, Prove
from kl_bitexact.compare.gate import FailOnChoice


def run_argv(inputs: ActionInputs, suite_files: Sequence[str]) -> list[str]:
    argv = ["run", *suite_files, "--out", str(inputs.results_dir)]
    if inputs.base_url:
        argv += ["--base-url", inputs.base_url]
    if inputs.fail_on != FailOnChoice():  # the run step's exit code: the publish step's verdict
        argv += ["--fail-on", str(inputs.fail_on)]
    if inputs.repeat and inputs.repeat > 1:
        argv += ["--repeat", str(inputs.repeat)]
    if inputs.exact:
        argv.append("--exact")
    if inputs.gate is not None:
        argv += ["--gate", inputs.gate.value]
    if inputs.prove is not Prove.OFF:
        argv += ["--prove-base", str(inputs.base_path)]
    return argv + list(inputs.args)


def pytest_argv(inputs: ActionInputs, test_files: Sequence[str], out: Path) -> list[str]:
    """Registered Python test files: `kl-bitexact pytest`, under the runner's interpreter
    (the `python` input: the engine is installed there, not in the action's environment).
    `args` are `run`'s, not pytest's."""
    argv = ["pytest", "--out", str(out), "--python", inputs.python]
    if inputs.exact:
        argv.append("--exact")
    if inputs.prove is not Prove.OFF:
        argv += ["--prove-base", str(inputs.base_path)]
    return [*argv, "--", *test_files]

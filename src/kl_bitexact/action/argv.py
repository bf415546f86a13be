"""Command lines for each action `command`, from the inputs (pure: no files, no processes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.action.inputs import ActionInputs


def run_argv(inputs: ActionInputs, suite_files: Sequence[str]) -> list[str]:
    argv = ["run", *suite_files, "--out", str(inputs.results_dir)]
    if inputs.base_url:
        argv += ["--base-url", inputs.base_url]
    return argv + list(inputs.args)


def report_argv(inputs: ActionInputs, results: Sequence[Path], out: Path) -> list[str]:
    return ["report", *map(str, results), *_baseline(inputs), "--out", str(out), *inputs.args]


def publish_argv(inputs: ActionInputs, results: Sequence[Path]) -> list[str]:
    argv = ["publish", *map(str, results), *_baseline(inputs), "--fail-on", inputs.fail_on]
    if inputs.strict:
        argv.append("--strict")
    if not inputs.comment:
        argv.append("--no-comment")
    return argv + list(inputs.args)


def lint_ci_argv(inputs: ActionInputs) -> list[str]:
    # `github` format: findings become annotations on the offending file and line.
    return ["lint-ci", "--format", "github", *inputs.args]


def shard_argv(inputs: ActionInputs, suite: str) -> list[str]:
    return ["shard", "--suite", suite, "--partitions", str(inputs.partitions), *inputs.args]


def _baseline(inputs: ActionInputs) -> list[str]:
    return ["--baseline", inputs.baseline] if inputs.baseline else []

"""Command lines for each action `command`, from the inputs (pure: no files, no processes)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.action.inputs import FETCH_BASELINE, ActionInputs, Prove
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


def report_argv(
    inputs: ActionInputs,
    results: Sequence[Path],
    out: Path,
    summary: str | None,
    proof: Sequence[Path] = (),
) -> list[str]:
    """`report`: the comment Markdown to `out`, the job summary, the gate; no GitHub calls,
    so a baseline to fetch is left out."""
    argv = ["report", *map(str, results), "--out", str(out)]
    if inputs.baseline and inputs.baseline != FETCH_BASELINE:
        argv += ["--baseline", inputs.baseline]
    if summary:
        argv += ["--job-summary", summary]
    argv += _expected_shards(inputs)
    return argv + _findings(inputs) + _proof(inputs, proof) + _policy(inputs) + list(inputs.args)


def lint_ci_argv(inputs: ActionInputs, output_format: str) -> list[str]:
    return ["lint-ci", "--format", output_format, *inputs.args]


def _expected_shards(inputs: ActionInputs) -> list[str]:
    """The names as a JSON list: parsed and checked once, when the inputs were read."""
    if not inputs.expected_shards:
        return []
    return ["--expected-shards", json.dumps(list(inputs.expected_shards), separators=(",", ":"))]


def _findings(inputs: ActionInputs) -> list[str]:
    return ["--findings", inputs.findings] if inputs.findings else []


def _proof(inputs: ActionInputs, proof: Sequence[Path]) -> list[str]:
    """`--proof FILE` per proof run found (prove on), `--proof-strict` for `prove: strict`."""
    if inputs.prove is Prove.OFF:
        return []
    files = [arg for path in proof for arg in ("--proof", str(path))]
    return (
        files
        + _expected_proofs(inputs)
        + (["--proof-strict"] if inputs.prove is Prove.STRICT else [])
    )


def _expected_proofs(inputs: ActionInputs) -> list[str]:
    """The planned proof jobs as a matrix again: parsed and checked once, when the inputs
    were read."""
    if not inputs.expected_proofs:
        return []
    include = [dataclasses.asdict(job) for job in inputs.expected_proofs]
    return ["--expected-proofs", json.dumps({"include": include}, separators=(",", ":"))]


def _policy(inputs: ActionInputs) -> list[str]:
    return ["--fail-on", str(inputs.fail_on)] + (["--strict"] if inputs.strict else [])

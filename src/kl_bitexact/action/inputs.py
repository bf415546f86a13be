"""The action's inputs, read from the INPUT_* variables that action.yml sets through `env:`."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from kl_bitexact.action import proof_jobs, shards
from kl_bitexact.action.proof_jobs import ProofJob
from kl_bitexact.compare.gate import FailOnChoice, parse_fail_on
from kl_bitexact.compare.history_limits import DEFAULT_RUNS as DEFAULT_HISTORY_RUNS
from kl_bitexact.compare.history_limits import MAX_RUNS as MAX_HISTORY_RUNS
from kl_bitexact.errors import ConfigError
from kl_bitexact.suite.model import Gate

# `baseline: fetch`: the newest successful base-branch run's results artifact (publish).
FETCH_BASELINE = "fetch"
_HINT = "fix the `with:` of the kl-bitexact step in your workflow"


class Prove(str, Enum):
    """`prove`: the proof of new tests off, on (a new test green on the base revision too is
    a warning), or strict (it gates). Equal to the input's word."""

    OFF = "false"
    ON = "true"
    STRICT = "strict"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ActionInputs:
    command: str
    suites: tuple[str, ...] = ()
    base_url: str = ""
    results_dir: Path = Path("kl-bitexact-results")
    baseline: str = ""
    # publish with `baseline: fetch`: the base branch's last N runs (0: no history)
    history_runs: int = DEFAULT_HISTORY_RUNS
    github_token: str = field(default="", repr=False)
    fail_on: FailOnChoice = field(default_factory=FailOnChoice)
    comment: bool = True
    strict: bool = False
    partitions: int | None = None
    repeat: int | None = None  # run: `--repeat N`, the flake meter
    exact: bool = False  # run: `--exact` for suites and Python test files alike
    gate: Gate | None = None  # run: `--gate bit-exact|noise-floor` (None: as the suites say)
    prove: Prove = Prove.OFF  # the proof of new tests
    base_path: Path = Path("kl-bitexact-base")  # the base revision's checkout (prove)
    proof_dir: Path = Path("kl-bitexact-proof")  # report, publish: the proof runs' results
    shard_timeout: float | None = None
    durations: tuple[str, ...] = ()  # shard: results files (globs) of earlier runs
    findings: str = ""
    expected_shards: tuple[str, ...] = ()
    expected_proofs: tuple[ProofJob, ...] = ()  # report, publish (prove)
    trusted_label: str = "run-ci"
    # install.sh builds the venv with it; run: pytest's interpreter for Python test files
    python: str = "python3"
    args: tuple[str, ...] = ()


def env_name(input_name: str) -> str:
    """The variable action.yml forwards an input through: `base-url` -> INPUT_BASE_URL."""
    return "INPUT_" + input_name.upper().replace("-", "_")


def read_inputs(environ: Mapping[str, str], commands: Collection[str]) -> ActionInputs:
    """The inputs, each checked and parsed once; `command` must be one of `commands` (the
    action's steps, commands/action.py's STEPS)."""

    def get(name: str, default: str = "") -> str:
        return environ.get(env_name(name), "").strip() or default

    return ActionInputs(
        command=_choice("command", get("command", "run"), tuple(commands)),
        suites=tuple(get("suites").split()),
        base_url=get("base-url"),
        results_dir=Path(get("results-dir", "kl-bitexact-results")),
        baseline=get("baseline"),
        history_runs=_history_runs(get("history-runs", str(DEFAULT_HISTORY_RUNS))),
        github_token=environ.get(env_name("github-token"), ""),
        fail_on=_fail_on(get("fail-on", "regression")),
        comment=_boolean("comment", get("comment", "true")),
        strict=_boolean("strict", get("strict", "false")),
        partitions=_positive_int("partitions", get("partitions")),
        repeat=_positive_int("repeat", get("repeat")),
        exact=_boolean("exact", get("exact", "false")),
        gate=Gate(_choice("gate", get("gate"), tuple(Gate))) if get("gate") else None,
        prove=Prove(_choice("prove", get("prove", "false").lower(), tuple(Prove))),
        base_path=Path(get("base-path", "kl-bitexact-base")),
        proof_dir=Path(get("proof-dir", "kl-bitexact-proof")),
        shard_timeout=_positive_float("shard-timeout", get("shard-timeout")),
        durations=tuple(get("durations").split()),
        findings=get("findings"),
        expected_shards=_shard_names(get("expected-shards")),
        expected_proofs=_proof_jobs(get("expected-proofs")),
        trusted_label=get("trusted-label", "run-ci"),
        python=get("python", "python3"),
        args=tuple(get("args").split()),
    )


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` when it is one of `allowed` (words, or str enums equal to them)."""
    if value not in allowed:
        raise ConfigError(
            f"action input `{name}`: {value!r} is not one of {', '.join(allowed)}", hint=_HINT
        )
    return value


def _fail_on(value: str) -> FailOnChoice:
    try:
        return parse_fail_on(value)
    except ValueError as error:
        raise ConfigError(f"action input `fail-on`: {error}", hint=_HINT) from None


def _history_runs(value: str) -> int:
    if value == "0":
        return 0
    if not value.isdigit() or not 1 <= int(value) <= MAX_HISTORY_RUNS:
        raise ConfigError(
            f"action input `history-runs`: {value!r} is not 0 (no history) or a whole number "
            f"from 1 to {MAX_HISTORY_RUNS}",
            hint=_HINT,
        )
    return int(value)


def _boolean(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"action input `{name}`: {value!r} is not true or false", hint=_HINT)
    return lowered == "true"


# For the numbers, empty or 0 means "not set" (a reusable workflow's number input
# cannot be empty).
def _positive_int(name: str, value: str) -> int | None:
    if value in ("", "0"):
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"action input `{name}`: {value!r} is not a positive integer", hint=_HINT)
    return int(value)


def _positive_float(name: str, value: str) -> float | None:
    if value in ("", "0"):
        return None
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise ConfigError(f"action input `{name}`: {value!r} is not a positive number", hint=_HINT)
    return number


def _shard_names(value: str) -> tuple[str, ...]:
    try:
        return shards.parse_names(value)
    except ValueError as error:
        raise ConfigError(f"action input `expected-shards`: {error}", hint=_HINT) from None


def _proof_jobs(value: str) -> tuple[ProofJob, ...]:
    try:
        return proof_jobs.parse_matrix(value)
    except ValueError as error:
        raise ConfigError(f"action input `expected-proofs`: {error}", hint=_HINT) from None

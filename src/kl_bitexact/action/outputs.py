"""Step outputs ($GITHUB_OUTPUT), the job summary and the one-line verdict of a command."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.results import io as results_io

CONCLUSIONS = {
    ExitCode.GATE_PASSED: "success",
    ExitCode.GATE_FAILED: "failure",
    # Stopped by a signal: a cancelled job (the runner sends SIGINT, then SIGTERM), a
    # hang-up; not a verdict on the change.
    ExitCode.INTERRUPTED: "cancelled",
    ExitCode.TERMINATED: "cancelled",
    ExitCode.HANGUP: "cancelled",
}


def conclusion(exit_code: int) -> str:
    """success | failure | error (could not run, or a bug) | cancelled."""
    return next((name for code, name in CONCLUSIONS.items() if code == exit_code), "error")


def status_counts(results_files: Sequence[Path]) -> dict[str, int]:
    """Tests per status over all files; files that do not load are left to the command."""
    counts: Counter[str] = Counter()
    for path in results_files:
        try:
            loaded = results_io.load(path)
        except ConfigError:
            continue
        counts.update(test.status.value for _, test in loaded.all_tests())
    return dict(sorted(counts.items()))


def summary_json(
    command: str, exit_code: int, results_files: Sequence[Path], comment_url: str
) -> str:
    document: dict[str, Any] = {
        "command": command,
        "exit_code": exit_code,
        "conclusion": conclusion(exit_code),
        "tests": status_counts(results_files),
        "results": [str(path) for path in results_files],
        "comment_url": comment_url,
    }
    return json.dumps(document, separators=(",", ":"))


def format_outputs(values: Mapping[str, str]) -> str:
    """$GITHUB_OUTPUT text; the heredoc form with a random delimiter survives any value."""
    lines = []
    for name, value in values.items():
        delimiter = f"ghadelimiter_{secrets.token_hex(8)}"
        lines += [f"{name}<<{delimiter}", value, delimiter]
    return "\n".join(lines) + "\n"


def append(path: str | None, text: str) -> None:
    """Append to a file GitHub hands the step ($GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY), if any."""
    if not path or not text:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")

"""Lint findings and their three renderings: text, JSON (contract) and GitHub annotations.

The JSON shape `{"findings": [{file, line, code, severity, message, fix}]}` is read by
`kl-bitexact report --findings` to show registration problems in the PR comment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum

from kl_bitexact.untrusted import escape


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


class Code(str, Enum):
    """Stable finding codes (documented in docs/lint-ci.md, "`kl-bitexact lint-ci`")."""

    NOT_ALLOWLISTED = "suite-not-allowlisted"
    NOT_DISPATCHED = "suite-not-dispatched"
    EMPTY_SUITE = "empty-suite"
    NO_REGISTRATION = "no-registration"
    NON_LITERAL = "non-literal-argument"
    UNKNOWN_ARGUMENT = "unknown-argument"
    NOT_TOP_LEVEL = "not-top-level"
    SUITE_AND_STAGE = "suite-and-stage"
    MISSING_SUITE = "missing-suite"
    MISSING_MAIN = "missing-main"
    DISABLED_WITHOUT_REASON = "disabled-without-reason"
    BAD_BLOCKED_BY = "bad-blocked-by"
    BAD_EST_TIME = "bad-est-time"
    UNKNOWN_RUNNER = "unknown-runner"
    BAD_SUITE_NAME = "bad-suite-name"
    NOTHING_REGISTERED = "nothing-registered"
    UNREADABLE = "unreadable-source"
    UNRESOLVED_DISPATCH = "unresolved-dispatch"
    CADENCE_MISMATCH = "cadence-mismatch"
    TIMEOUT_EXCEEDED = "timeout-exceeded"
    TIME_LIMIT_EXCEEDED = "time-limit-exceeded"
    OUTSIDE_ROOT = "outside-root"


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int | None
    code: str
    severity: Severity
    message: str
    fix: str


def error(file: str, line: int | None, code: Code, message: str, fix: str) -> Finding:
    # Every finding gets a line (annotations need one): an unknown one is the file's first.
    return Finding(file, line or 1, code.value, Severity.ERROR, message, fix)


def warning(file: str, line: int | None, code: Code, message: str, fix: str) -> Finding:
    return Finding(file, line or 1, code.value, Severity.WARNING, message, fix)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(finding.severity is Severity.ERROR for finding in findings)


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Stable order: by file, then line (unknown lines first), then code."""
    return sorted(set(findings), key=lambda f: (f.file, f.line or 0, f.code, f.message))


# --- renderings -------------------------------------------------------------------------


def to_json(findings: Sequence[Finding]) -> str:
    items = [{**asdict(finding), "severity": finding.severity.value} for finding in findings]
    return json.dumps({"findings": items}, indent=2) + "\n"


def to_text(findings: Sequence[Finding]) -> str:
    lines = []
    for finding in findings:
        where = f"{finding.file}:{finding.line}" if finding.line else finding.file
        lines.append(f"{where}: {finding.severity.value} [{finding.code}] {finding.message}")
        lines.append(f"    fix: {finding.fix}")
    lines.append(_summary(findings))
    return "\n".join(lines) + "\n"


def _summary(findings: Sequence[Finding]) -> str:
    errors = sum(1 for finding in findings if finding.severity is Severity.ERROR)
    warnings = len(findings) - errors
    if not findings:
        return "lint-ci: no findings: every registered suite is allowlisted and dispatched"
    return f"lint-ci: {errors} error(s), {warnings} warning(s)"


def to_github(findings: Sequence[Finding]) -> str:
    """GitHub workflow commands: one `::error file=F,line=L,title=T::message` per finding."""
    lines = []
    for finding in findings:
        properties = [f"file={escape.command_file(finding.file)}"]
        if finding.line:
            properties.append(f"line={finding.line}")
        properties.append(f"title={escape.command_property('kl-bitexact ' + finding.code)}")
        body = escape.command_data(f"{finding.message} Fix: {finding.fix}")
        lines.append(f"::{finding.severity.value} {','.join(properties)}::{body}")
    return "".join(line + "\n" for line in lines)


RENDERERS = {"text": to_text, "json": to_json, "github": to_github}

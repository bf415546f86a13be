"""The registration fields of kl-bitexact suite files (YAML): name or stage+runner_config,
est_time and tests[].blocked_by. The full suite schema belongs to `kl_bitexact.suite.load`; this
reader needs only what CI registration depends on, and tolerates everything else."""

from __future__ import annotations

from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import yamlio
from kl_bitexact.registry.findings import Code, Finding, error, warning
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration, suite_name
from kl_bitexact.registry.scan import ScannedFile
from kl_bitexact.suite.references import parse_ref

# `#N` references resolve against the repository at publish time; here only their shape
# matters, so any repository stands in for it.
_SHAPE_ONLY_REPO = "owner/repo"


def scan_suite_file(text: str, path: str) -> ScannedFile:
    document = yamlio.load(text, path)
    suites = document if isinstance(document, list) else [document]
    registrations: list[Registration] = []
    findings: list[Finding] = []
    for suite in suites:
        if not isinstance(suite, dict):
            raise ConfigError(
                f"{path}:{yamlio.node_line(document) or 1}: a suite file holds a mapping "
                "(one suite) or a list of mappings",
                hint="see docs/suites.md",
            )
        registration, problems = _read_suite(suite, path)
        findings.extend(problems)
        if registration is not None:
            registrations.append(registration)
    return ScannedFile(path, tuple(registrations), True, tuple(findings))


def _read_suite(suite: Any, path: str) -> tuple[Registration | None, list[Finding]]:
    line = yamlio.node_line(suite)
    findings = _blocked_by_problems(suite, path)
    name, problem = _name(suite, path, line)
    if problem is not None:
        findings.append(problem)
    est_time, problem = _est_time(suite, path, name, line)
    if problem is not None:
        findings.append(problem)
    if name is None:
        return None, findings
    registration = Registration(
        file=path,
        line=line or 1,
        backend=SUITE_FILE_BACKEND,
        suite=name,
        est_time=est_time,
        stage=_text(suite.get("stage")),
        runner_config=_text(suite.get("runner_config")),
    )
    return registration, findings


def _est_time(
    suite: Any, path: str, name: str | None, line: int | None
) -> tuple[float, Finding | None]:
    est_time = suite.get("est_time")
    if isinstance(est_time, (int, float)) and not isinstance(est_time, bool) and est_time > 0:
        return float(est_time), None
    # A suite runs without est_time; only its sharding is blind. A wrong value is an error.
    report = warning if est_time is None else error
    return 0.0, report(
        path,
        yamlio.key_line(suite, "est_time") or line,
        Code.BAD_EST_TIME,
        f"suite {name or '?'}: est_time is {'missing' if est_time is None else repr(est_time)}; "
        "sharding needs a positive number of seconds",
        "add `est_time: <seconds>` (e.g. the suite's last measured duration)",
    )


def _name(suite: Any, path: str, line: int | None) -> tuple[str | None, Finding | None]:
    name, stage, runner = (_text(suite.get(key)) for key in ("name", "stage", "runner_config"))
    if name is not None and (stage is not None or runner is not None):
        return None, error(
            path,
            line,
            Code.SUITE_AND_STAGE,
            f"suite {name!r} gives `name` together with `stage`/`runner_config`",
            "keep either `name:` or the pair `stage:` + `runner_config:`",
        )
    if stage is not None and runner is not None:
        return suite_name(stage, runner), None
    if name is not None and stage is None and runner is None:
        return name, None
    return None, error(
        path,
        line,
        Code.MISSING_SUITE,
        "suite has no name: it needs `name:` or both `stage:` and `runner_config:` (strings)",
        "add `name: <suite>` or `stage:` + `runner_config:`",
    )


def _blocked_by_problems(suite: Any, path: str) -> list[Finding]:
    tests = suite.get("tests")
    if not isinstance(tests, list):
        return []
    findings = []
    for test in tests:
        if isinstance(test, dict) and "blocked_by" in test:
            line = yamlio.key_line(test, "blocked_by")
            findings.extend(_check_refs(test["blocked_by"], path, line, test.get("name")))
    return findings


def _check_refs(value: Any, path: str, line: int | None, test: Any) -> list[Finding]:
    refs = value if isinstance(value, list) else [value]
    findings = []
    for ref in refs:
        why = _ref_problem(ref)
        if why is not None:
            findings.append(
                error(
                    path,
                    line,
                    Code.BAD_BLOCKED_BY,
                    f"test {test!r}: blocked_by {ref!r} {why}; the blocker can never be "
                    "resolved, so the test would fail closed",
                    "write owner/repo#N, #N, or https://github.com/owner/repo/pull/N",
                )
            )
    return findings


def _ref_problem(ref: Any) -> str | None:
    if not isinstance(ref, str):
        return "is not a string"
    try:
        parse_ref(ref, default_repo=_SHAPE_ONLY_REPO)
    except ConfigError:
        return "is not a pull request or issue reference"
    return None


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) else None

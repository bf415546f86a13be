"""Read sglang-style `register_<backend>_ci(...)` calls from a test file's source (AST only).

The calls are no-ops at run time; sglang's test/run_suite.py finds them by parsing, so only
bare calls at module top level with literal arguments count. Anything else is silently
ignored there, which is exactly what this scan reports instead.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any

from kl_bitexact.errors import ConfigError, did_you_mean
from kl_bitexact.registry import toplevel
from kl_bitexact.registry.findings import Code, Finding, error
from kl_bitexact.registry.model import Registration, suite_name

BACKENDS = ("cpu", "cuda", "amd", "npu", "xpu", "musa", "mlx")
REGISTER_FUNCTIONS = {f"register_{backend}_ci": backend for backend in BACKENDS}
_NAMES = frozenset(REGISTER_FUNCTIONS)
POSITIONAL = ("est_time", "suite", "nightly", "disabled")
KEYWORD_ONLY = ("stage", "runner_config", "in_process_group")
PARAMETERS = POSITIONAL + KEYWORD_ONLY
_MISSING = object()
# A top-level registration call: parsed, or read as keyword literals (`toplevel`).
Call = ast.Call | toplevel.LiteralCall


@dataclass(frozen=True)
class ScannedFile:
    path: str
    registrations: tuple[Registration, ...]
    has_main: bool
    findings: tuple[Finding, ...]


# The largest test file in sglang is under 200 kB; past this a source is not a test file.
MAX_SOURCE_BYTES = 4 * 1024 * 1024


def scan_source(source: str, path: str) -> ScannedFile:
    """Registrations and problems of one test file; a syntax error is a ConfigError.

    Only the top-level registration calls and main block are parsed when they can be cut
    out safely (`toplevel`); otherwise, and for every file with a problem the fast path
    cannot see, the whole file is parsed. A syntax error elsewhere in the file is then not
    seen: Python itself reports it when the test runs.

    A source too large (the reader passes at most MAX_SOURCE_BYTES + 1 characters), or
    nested too deep for Python's parser (a 200,000-long attribute or operator chain), is
    one `unreadable-source` finding instead of a crash.
    """
    if len(source) > MAX_SOURCE_BYTES:
        return unreadable(path, f"too large to read (over {MAX_SOURCE_BYTES // 2**20} MB)")
    try:
        return _scan(source, path)
    except (RecursionError, MemoryError):
        return unreadable(path, "nested too deep to read (Python's parser gave up)")


def unreadable(path: str, why: str) -> ScannedFile:
    finding = error(
        path,
        1,
        Code.UNREADABLE,
        f"{why}, so its CI registration cannot be checked",
        f"keep test files under {MAX_SOURCE_BYTES // 2**20} MB and their expressions shallow "
        "(split long chains), or exclude the file in .kl-bitexact.yaml",
    )
    return ScannedFile(path, (), False, (finding,))


def _scan(source: str, path: str) -> ScannedFile:
    located = toplevel.locate(source, _NAMES)
    if located is None:
        return _scan_tree(_parse(source, path), path)
    has_main = any(_is_main_block(block) for block in located.main_blocks)
    return _scan_calls(list(located.calls), has_main, [], path)


def _scan_tree(tree: ast.Module, path: str) -> ScannedFile:
    top_level: list[Call] = [call for call in _top_level_calls(tree) if _register_name(call)]
    nested = _nested_calls(tree, set(map(id, top_level)), path)
    has_main = any(_is_main_block(statement) for statement in tree.body)
    return _scan_calls(top_level, has_main, nested, path)


def _scan_calls(
    top_level: list[Call], has_main: bool, findings: list[Finding], path: str
) -> ScannedFile:
    registrations: list[Registration] = []
    findings = list(findings)
    for call in top_level:
        registration, problems = _read_call(call, path)
        findings.extend(problems)
        if registration is not None:
            registrations.append(registration)
    findings.extend(_file_checks(path, top_level, registrations, has_main))
    return ScannedFile(path, tuple(registrations), has_main, tuple(findings))


def _parse(source: str, path: str) -> ast.Module:
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as problem:
        raise ConfigError(
            f"{path}:{problem.lineno}: not valid Python ({problem.msg}), so its CI "
            "registration cannot be read",
            hint="fix the syntax error; run `python -m py_compile FILE` to check",
        ) from None


def _top_level_calls(tree: ast.Module) -> list[ast.Call]:
    return [
        statement.value
        for statement in tree.body
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
    ]


def _register_name(call: Call) -> str | None:
    if isinstance(call, toplevel.LiteralCall):
        return call.name
    func = call.func
    if isinstance(func, ast.Name) and func.id in REGISTER_FUNCTIONS:
        return func.id
    return None


def _nested_calls(tree: ast.Module, top_level: set[int], path: str) -> list[Finding]:
    return [
        error(
            path,
            node.lineno,
            Code.NOT_TOP_LEVEL,
            f"{_register_name(node)}() is not a bare statement at module top level; "
            "run_suite.py never sees it, so this registration is ignored",
            "move the call to the top level of the module, outside any def, class, if, "
            "or assignment",
        )
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _register_name(node) and id(node) not in top_level
    ]


@functools.lru_cache(maxsize=256)  # the same shared main block of most files (toplevel.py)
def _is_main_block(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` whose body calls something (so the file runs tests)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    is_guard = (
        isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )
    body = ast.Module(body=statement.body, type_ignores=[])
    return is_guard and any(isinstance(node, ast.Call) for node in ast.walk(body))


def _file_checks(
    path: str, calls: list[Call], registrations: list[Registration], has_main: bool
) -> list[Finding]:
    if not calls:
        return [
            error(
                path,
                1,
                Code.NO_REGISTRATION,
                "no register_*_ci() call: run_suite.py rejects the file and fails every suite",
                'add e.g. `register_cuda_ci(est_time=300, suite="...")` at the top level, '
                "or move the file out of the registered tree",
            )
        ]
    enabled = [r for r in registrations if r.enabled]
    if enabled and not has_main:
        return [
            error(
                path,
                enabled[0].line,
                Code.MISSING_MAIN,
                'enabled test file without an `if __name__ == "__main__":` block that calls '
                "something: CI runs `python3 FILE` and it would exit green without testing",
                'add `if __name__ == "__main__": unittest.main()` (or '
                "`sys.exit(pytest.main([__file__]))` for pytest-style tests)",
            )
        ]
    return []


# --- one call ---------------------------------------------------------------------------


def _read_call(call: Call, path: str) -> tuple[Registration | None, list[Finding]]:
    name = _register_name(call) or ""
    values, findings = _bind_arguments(call, name, path)
    findings.extend(_type_problems(values, call, name, path))
    suite, shape_problems = _effective_suite(values, call, name, path)
    findings.extend(shape_problems)
    if suite is None:
        return None, findings
    registration = Registration(
        file=path,
        line=call.lineno,
        backend=REGISTER_FUNCTIONS[name],
        suite=suite,
        est_time=_number(values.get("est_time")),
        nightly=values.get("nightly") is True,
        disabled=_disabled(values),
        in_process_group=_text(values.get("in_process_group")),
        stage=_text(values.get("stage")),
        runner_config=_text(values.get("runner_config")),
    )
    return registration, findings


def _bind_arguments(call: Call, name: str, path: str) -> tuple[dict[str, Any], list[Finding]]:
    """Map parameter names to literal values; non-literals map to _MISSING."""
    values: dict[str, Any] = {}
    findings: list[Finding] = []
    if isinstance(call, toplevel.LiteralCall):  # keyword literals only, each given once
        for parameter, value in call.keywords:
            findings.extend(_bind_one(values, parameter, value, call, name, path))
        return values, findings
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    if len(positional) != len(call.args) or any(kw.arg is None for kw in call.keywords):
        findings.append(_non_literal(path, call, name, "*args/**kwargs"))
    if len(positional) > len(POSITIONAL):
        findings.append(
            _unknown(path, call, f"{name}() takes at most {len(POSITIONAL)} positional arguments")
        )
    pairs = list(zip(POSITIONAL, positional, strict=False))
    pairs += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
    for parameter, node in pairs:
        findings.extend(_bind_one(values, parameter, _literal(node), call, name, path))
    return values, findings


def _bind_one(
    values: dict[str, Any], parameter: str, value: Any, call: Call, name: str, path: str
) -> list[Finding]:
    if parameter not in PARAMETERS:
        close = did_you_mean(parameter, PARAMETERS)
        hint = f" ({close})" if close else ""
        return [_unknown(path, call, f"{name}() has no argument {parameter!r}{hint}")]
    if parameter in values:
        return [_unknown(path, call, f"{name}() gets {parameter!r} twice")]
    values[parameter] = value
    if value is _MISSING:
        return [_non_literal(path, call, name, parameter)]
    return []


def _literal(node: ast.expr) -> Any:
    """The value of a constant (a negated number counts), else _MISSING."""
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    return _MISSING


def _non_literal(path: str, call: Call, name: str, what: str) -> Finding:
    return error(
        path,
        call.lineno,
        Code.NON_LITERAL,
        f"{name}(): {what} is not a literal; the registration is read without importing "
        "the file, so only constants can be understood",
        "write the value as a literal (a number, string, True/False or None)",
    )


def _unknown(path: str, call: Call, message: str) -> Finding:
    return error(
        path,
        call.lineno,
        Code.UNKNOWN_ARGUMENT,
        message,
        "use only est_time, suite, nightly, disabled (positional or keyword) and the "
        "keywords stage, runner_config, in_process_group",
    )


def _type_problems(values: dict[str, Any], call: Call, name: str, path: str) -> list[Finding]:
    findings = []
    est_time = values.get("est_time")
    if est_time is not _MISSING and not _seconds(est_time):
        findings.append(
            error(
                path,
                call.lineno,
                Code.BAD_EST_TIME,
                f"{name}(): est_time is {'missing' if est_time is None else repr(est_time)}; "
                "sharding and the CI timeout budget need a number of seconds, 0 or more",
                "pass est_time=<seconds the file takes>, e.g. the duration of its last run",
            )
        )
    disabled = values.get("disabled")
    if disabled is not None and disabled is not _MISSING and not _is_reason(disabled):
        findings.append(
            error(
                path,
                call.lineno,
                Code.DISABLED_WITHOUT_REASON,
                f"{name}(): disabled={disabled!r} gives no reason, so nobody knows when to "
                "turn the test back on",
                'write disabled="<why>, see owner/repo#N"',
            )
        )
    return findings


def _effective_suite(
    values: dict[str, Any], call: Call, name: str, path: str
) -> tuple[str | None, list[Finding]]:
    suite, stage, runner = (_text(values.get(key)) for key in ("suite", "stage", "runner_config"))
    if suite is not None and (stage is not None or runner is not None):
        return None, [
            error(
                path,
                call.lineno,
                Code.SUITE_AND_STAGE,
                f"{name}() gives suite= together with stage=/runner_config=; the suite is "
                "ambiguous and run_suite.py rejects the file",
                "keep either suite=... or the pair stage=..., runner_config=...",
            )
        ]
    if stage is not None and runner is not None:
        return suite_name(stage, runner), []
    if suite is not None and stage is None and runner is None:
        return suite, []
    if any(values.get(key) is _MISSING for key in ("suite", "stage", "runner_config")):
        return None, []  # already reported as a non-literal argument
    return None, [
        error(
            path,
            call.lineno,
            Code.MISSING_SUITE,
            f"{name}() names no suite (it needs suite= or both stage= and runner_config=)",
            'add suite="..." or stage="...", runner_config="..." as string literals',
        )
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_reason(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _seconds(value: Any) -> bool:
    """A valid est_time: a number, 0 or more (sglang's collect_tests takes 0: a file whose
    time is negligible)."""
    return _is_number(value) and float(value) >= 0


def _number(value: Any) -> float:
    return float(value) if _seconds(value) else 0.0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _disabled(values: dict[str, Any]) -> str | None:
    disabled = values.get("disabled")
    if disabled is None:
        return None
    # A reason-less or non-literal `disabled` still disables the file at run time.
    return disabled if isinstance(disabled, str) and disabled.strip() else "disabled"

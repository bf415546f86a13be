"""Attribute the lines of a console log to the tests that printed them (pure).

JUnit XML holds each test's output only when pytest captured it. A run with `-s`, or one
whose XML was written without `junit_logging`, leaves the KL lines in the console log
only; these markers, which pytest and unittest print when a test starts or is reported,
split that log per test:

    tests/test_kl.py::TestKL::test_decode            pytest -v (with -s, output follows)
    ______ TestKL.test_decode ______                 pytest failure / -rA sections
    test_decode (test_kl.TestKL.test_decode) ...     unittest -v (Python 3.11+)
    test_decode (test_kl.TestKL) ...                 unittest -v (older Python)
    FAILED tests/test_kl.py::TestKL::test_decode     pytest summary lines
    FAIL: test_decode (test_kl.TestKL.test_decode)   unittest failure reports

A pytest banner (`==== FAILURES ====`) ends the current test's segment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_BANNER = re.compile(r"^={3,} .* ={3,}$")
_PYTEST_WORD = r"(?:(?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) )?"


def split_log(text: str, node_ids: Iterable[str]) -> Mapping[str, str]:
    """For each node id, the log text printed from its marker to the next test's marker."""
    markers = [(node_id, _marker(node_id)) for node_id in node_ids]
    segments: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if _BANNER.match(line):
            current = None
            continue
        for node_id, marker in markers:
            found = marker.search(line)
            if found:
                current, line = node_id, line[found.end() :]
                break
        if current is not None:
            segments.setdefault(current, []).append(line)
    return {node_id: "\n".join(lines) for node_id, lines in segments.items()}


def _marker(node_id: str) -> re.Pattern[str]:
    path, _, rest = node_id.partition("::")
    parts = rest.split("::") if rest else []
    name = parts[-1] if parts else path
    dotted = ".".join(parts)
    module = path.removesuffix(".py").replace("/", ".")
    classes = ".".join(parts[:-1])
    alternatives = [
        rf"^{_PYTEST_WORD}{re.escape(node_id)}(?=\s|$)",
        rf"^_{{3,}} (?:ERROR at (?:setup|teardown) of )?{re.escape(dotted)} _{{3,}}$",
    ]
    if classes:
        # unittest names the module by import path; only its last part is certain.
        module_tail = re.escape(module.rsplit(".", 1)[-1])
        owner = rf"(?:[\w.]*\.)?{module_tail}\.{re.escape(classes)}"
        alternatives.append(
            rf"^(?:(?:FAIL|ERROR): )?{re.escape(name)} \({owner}(?:\.{re.escape(name)})?\)"
            r"(?: \.\.\.)?"
        )
    return re.compile("|".join(f"(?:{item})" for item in alternatives))

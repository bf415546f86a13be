"""Reading JUnit XML as pytest writes it, treating the file as untrusted input.

The file may come from a run that executed PR code, so it is parsed with defusedxml
(no entity expansion, no external entities) and bounded in size; a malformed or truncated
file is a ConfigError naming the file and line, never a traceback.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted.jsonfile import read_bounded

# Captured output of a whole GPU suite stays far under this; a bigger file is not ours.
MAX_JUNIT_BYTES = 256 * 1024 * 1024


class Outcome(str, Enum):
    """What JUnit (plus pytest's `type` attribute on <skipped>) says happened."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    XFAIL = "xfail"


@dataclass(frozen=True)
class JUnitCase:
    """One <testcase>."""

    classname: str
    name: str
    file: str | None
    time_s: float
    outcome: Outcome
    message: str
    details: str
    system_out: str
    system_err: str
    properties: tuple[tuple[str, str], ...] = ()

    def property(self, name: str) -> str | None:
        """The last value recorded under `name` (pytest appends; the last one wins)."""
        values = [value for key, value in self.properties if key == name]
        return values[-1] if values else None


def read(
    path: Path, *, max_bytes: int = MAX_JUNIT_BYTES, interrupted: bool = False
) -> tuple[JUnitCase, ...]:
    """Every test case in a JUnit XML file, in file order. `interrupted`: the session was
    stopped, and the bare `<testcase time=... />` pytest writes for the test a
    KeyboardInterrupt ended (no name, no class, no content) is left out; the caller
    reports that test from its plan."""
    root = _parse(path, max_bytes)
    if root.tag not in ("testsuites", "testsuite"):
        raise ConfigError(
            f"{path}: the root element is <{root.tag}>, not <testsuites> or <testsuite>",
            hint="pass the file written by pytest --junitxml",
        )
    # <testsuites> nests <testsuite>s, which may nest further (some tools do).
    elements = root.iter("testcase")
    if interrupted:
        elements = (element for element in elements if not _bare(element))
    return tuple(_case(element, path) for element in elements)


def _bare(element: ET.Element) -> bool:
    return set(element.attrib) <= {"time"} and len(element) == 0 and not element.text


def _parse(path: Path, max_bytes: int) -> ET.Element:
    raw = read_bounded(
        path,
        what="JUnit XML",
        max_bytes=max_bytes,
        hint="pass the file written by pytest --junitxml",
    )
    try:
        root = SafeET.fromstring(raw)
    except ET.ParseError as error:
        raise ConfigError(_parse_problem(path, raw, error)) from None
    except DefusedXmlException as error:
        raise ConfigError(f"{path}: refused unsafe XML ({type(error).__name__})") from None
    except LookupError as error:  # <?xml encoding="x-nonexistent"?>
        raise ConfigError(f"{path}: invalid JUnit XML: {error} in the XML declaration") from None
    if root is None:
        raise ConfigError(f"{path}: the JUnit XML has no root element")
    return root


def _parse_problem(path: Path, text: bytes, error: ET.ParseError) -> str:
    line, column = error.position
    ends_early = line >= text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
    why = "the file ends early (truncated: was pytest killed?)" if ends_early else str(error)
    return f"{path}: invalid JUnit XML at line {line} column {column + 1}: {why}"


def _case(element: ET.Element, path: Path) -> JUnitCase:
    name, classname = element.get("name"), element.get("classname", "")
    if not name:
        raise ConfigError(f"{path}: a <testcase> has no name attribute")
    outcome, message, details = _outcome(element)
    return JUnitCase(
        classname=classname,
        name=name,
        file=element.get("file"),
        time_s=_seconds(element.get("time")),
        outcome=outcome,
        message=message,
        details=details,
        system_out=_joined(element, "system-out"),
        system_err=_joined(element, "system-err"),
        properties=tuple(
            (prop.get("name", ""), prop.get("value", "")) for prop in element.iter("property")
        ),
    )


def _outcome(element: ET.Element) -> tuple[Outcome, str, str]:
    # A failed call and an erroring teardown give both elements; the call's verdict leads.
    for tag, outcome in (("failure", Outcome.FAILED), ("error", Outcome.ERROR)):
        child = element.find(tag)
        if child is not None:
            return outcome, child.get("message", ""), child.text or ""
    skipped = element.find("skipped")
    if skipped is not None:
        xfail = skipped.get("type") == "pytest.xfail"
        outcome = Outcome.XFAIL if xfail else Outcome.SKIPPED
        message = skipped.get("message", "")
        if message == COLLECTION_SKIPPED:
            message = _collection_skip_reason(skipped.text or "") or message
        return outcome, message, skipped.text or ""
    return Outcome.PASSED, "", ""


# pytest's message for a whole file skipped while it was imported; the reason is only in
# the element's text, `('path', line, 'unittest.case.SkipTest: REASON')` or `'Skipped: ...'`.
COLLECTION_SKIPPED = "collection skipped"
_SKIP_PREFIXES = ("unittest.case.SkipTest: ", "Skipped: ")


def _collection_skip_reason(text: str) -> str:
    quoted = text.rstrip().removesuffix(")").rstrip().removesuffix("'").removesuffix('"')
    for prefix in _SKIP_PREFIXES:
        if prefix in quoted:
            return quoted.rpartition(prefix)[2]
    return ""


def _joined(element: ET.Element, tag: str) -> str:
    # pytest writes <system-out> twice for some skipped tests; keep all of it.
    return "\n".join(child.text or "" for child in element.findall(tag))


def _seconds(text: str | None) -> float:
    try:
        value = float(text or 0)
    except ValueError:
        return 0.0
    return value if value >= 0 and value != float("inf") else 0.0

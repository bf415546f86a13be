"""Registration findings as printed by `kl-bitexact lint-ci --format json`, read back.

The document is `{"findings": [{"file", "line", "code", "severity", "message", "fix"}]}`
(the contract between `lint-ci` and `report --findings`). It is read from a file a CI step wrote,
so it is checked field by field and errors name the file and the bad entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry.findings import Finding, Severity
from kl_bitexact.untrusted.jsonfile import read_json

__all__ = ["Finding", "load", "parse"]

MAX_FINDINGS_BYTES = 8 * 1024 * 1024
SEVERITIES = tuple(severity.value for severity in Severity)


def load(path: Path) -> tuple[Finding, ...]:
    hint = "pass the output of `kl-bitexact lint-ci --format json`"
    document = read_json(path, what="findings", max_bytes=MAX_FINDINGS_BYTES, hint=hint)
    return parse(document, source=str(path))


def parse(document: Any, *, source: str = "<findings>") -> tuple[Finding, ...]:
    if not isinstance(document, Mapping) or not isinstance(document.get("findings"), list):
        raise ConfigError(
            f'{source}: expected an object with a "findings" list',
            hint="pass the output of `kl-bitexact lint-ci --format json`",
        )
    return tuple(
        _finding(item, f"{source}: findings[{i}]") for i, item in enumerate(document["findings"])
    )


def _finding(item: Any, where: str) -> Finding:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where} is not an object")
    line = item.get("line")
    if line is not None and (not isinstance(line, int) or isinstance(line, bool)):
        raise ConfigError(f"{where}.line must be an integer or null, not {line!r}")
    severity = _string(item, "severity", where)
    if severity not in SEVERITIES:
        raise ConfigError(f"{where}.severity must be one of {', '.join(SEVERITIES)}")
    return Finding(
        file=_string(item, "file", where),
        line=line,
        code=_string(item, "code", where),
        severity=Severity(severity),
        message=_string(item, "message", where),
        fix=_string(item, "fix", where, required=False),
    )


def _string(item: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = item.get(key, None if required else "")
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string", hint=f'add "{key}": "..."')
    return value

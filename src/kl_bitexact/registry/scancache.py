"""Scan many test files fast: results cached by content hash, cold scans in parallel.

The cache is one JSON file per repository root under the cache directory
($KL_BITEXACT_CACHE_DIR, else $XDG_CACHE_HOME/kl-bitexact, else ~/.cache/kl-bitexact),
holding for each file the hash of its path and content and what the scan found. JSON, not
pickle: a CI cache may be restored from a run a pull request controlled. Entries of files
that no longer exist are dropped on every write, so it stays the size of the tree. A file
that cannot be scanned (a syntax error) is never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry.findings import Finding, Severity
from kl_bitexact.registry.model import Registration
from kl_bitexact.registry.scan import ScannedFile

# Bump when the scan's output for the same input changes.
FORMAT = "scan-v2"
# Below this many files to scan, starting worker processes costs more than it saves.
PARALLEL_MIN_FILES = 800
_CHUNK = 200

Scanner = Callable[[str, str], ScannedFile]


def cache_dir() -> Path:
    configured = os.environ.get("KL_BITEXACT_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kl-bitexact"


def scan_all(root: Path, sources: Sequence[tuple[str, str]], scanner: Scanner) -> list[ScannedFile]:
    """`scanner(text, path)` for each (path, text), reusing cached results."""
    store = _Store(root)
    keys = [_key(path, text) for path, text in sources]
    results: dict[str, ScannedFile] = {}
    missing = []
    for (path, text), key in zip(sources, keys, strict=True):
        cached = store.get(key)
        if cached is None:
            missing.append((path, text))
        else:
            results[path] = cached
    results.update(_scan(missing, scanner))
    store.save({key: results[path] for (path, _), key in zip(sources, keys, strict=True)})
    return [results[path] for path, _ in sources]


def _key(path: str, text: str) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(path.encode() + b"\0" + text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _scan(items: list[tuple[str, str]], scanner: Scanner) -> dict[str, ScannedFile]:
    workers = min(os.cpu_count() or 1, 4)
    if len(items) < PARALLEL_MIN_FILES or workers < 2:
        return {path: scanner(text, path) for path, text in items}
    chunks = [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]
    results: dict[str, ScannedFile] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for outcome in pool.map(_scan_chunk, chunks, [scanner] * len(chunks)):
            if isinstance(outcome, tuple):
                raise ConfigError(outcome[0], hint=outcome[1])
            results.update(outcome)
    return results


def _scan_chunk(
    items: list[tuple[str, str]], scanner: Scanner
) -> dict[str, ScannedFile] | tuple[str, str | None]:
    """One worker's share; a ConfigError travels back as (message, hint)."""
    try:
        return {path: scanner(text, path) for path, text in items}
    except ConfigError as problem:
        return problem.message, problem.hint


class _Store:
    def __init__(self, root: Path) -> None:
        name = hashlib.blake2b(str(root.resolve()).encode(), digest_size=8).hexdigest()
        self.path = cache_dir() / "lint" / f"{name}.json"
        self.entries = self._load()

    def _load(self) -> dict[str, Any]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        valid = isinstance(document, dict) and document.get("format") == FORMAT
        entries = document.get("entries") if valid else None
        return entries if isinstance(entries, dict) else {}

    def get(self, key: str) -> ScannedFile | None:
        data = self.entries.get(key)
        if data is None:
            return None
        try:
            return _decode(data)
        except (KeyError, TypeError, ValueError):
            del self.entries[key]  # a damaged entry is rescanned and rewritten
            return None

    def save(self, scanned: dict[str, ScannedFile]) -> None:
        entries = {key: self.entries.get(key) or _encode(found) for key, found in scanned.items()}
        if entries == self.entries:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"format": FORMAT, "entries": entries}, out, separators=(",", ":"))
            os.replace(temporary, self.path)
        except OSError:
            pass  # a read-only or full cache directory only costs speed


def _encode(scanned: ScannedFile) -> dict[str, Any]:
    return {
        "path": scanned.path,
        "has_main": scanned.has_main,
        "registrations": [asdict(r) for r in scanned.registrations],
        "findings": [{**asdict(f), "severity": f.severity.value} for f in scanned.findings],
    }


def _decode(data: dict[str, Any]) -> ScannedFile:
    return ScannedFile(
        path=str(data["path"]),
        registrations=tuple(Registration(**item) for item in data["registrations"]),
        has_main=bool(data["has_main"]),
        findings=tuple(
            Finding(**{**item, "severity": Severity(item["severity"])}) for item in data["findings"]
        ),
    )

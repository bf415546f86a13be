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
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry.findings import Finding, Severity
from kl_bitexact.registry.model import Registration
from kl_bitexact.registry.scan import ScannedFile

# Bump when the scan's output for the same input changes.
FORMAT = "scan-v4"  # v4: est_time=0 is valid
# Below this many files to scan, starting worker processes costs more than it saves.
PARALLEL_MIN_FILES = 800
_CHUNK = 200
# A file modified this close to the last cache write may have changed within one clock tick.
TRUST_AGE_NS = 2_000_000_000

Scanner = Callable[[bytes, str], ScannedFile]  # (content, path)


def cache_dir() -> Path:
    configured = os.environ.get("KL_BITEXACT_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kl-bitexact"


def scan_all(
    root: Path, paths: Sequence[str], read: Callable[[str], bytes], scanner: Scanner
) -> list[ScannedFile]:
    """`scanner(read(path), path)` for each path, reusing cached results.

    Results are keyed by the hash of path and content. A file whose size and modification
    time are those recorded with its hash, and older than the cache file by more than
    TRUST_AGE_NS (so not changed within the same clock tick as the last write), is not even
    read again: as git's index does.
    """
    store = _Store(root)
    results: dict[str, ScannedFile] = {}
    keys: dict[str, str] = {}
    stats: dict[str, list[int]] = {}
    missing = []
    for path in paths:
        stat = _stat(root, path)
        key = store.trusted_key(path, stat)
        cached = store.get(key) if key is not None else None
        if cached is None:
            content = read(path)
            key = _key(path, content)
            cached = store.get(key)
            if cached is None:
                missing.append((path, content))
        if cached is not None:
            results[path] = cached
        assert key is not None  # the trusted key, or the one just computed
        keys[path] = key
        if stat is not None:
            stats[path] = [*stat, 0]
    results.update(_scan(missing, scanner))
    store.save({keys[path]: results[path] for path in paths}, stats, keys)
    return [results[path] for path in paths]


def _stat(root: Path, path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(os.path.join(root, path))
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


def _key(path: str, content: bytes) -> str:
    """128 bits of SHA-256 of the path and content: OpenSSL's SHA-256 (SHA-NI) hashes
    twice as fast as Python's own BLAKE2b, which a cold scan of sglang spent 4% on."""
    digest = hashlib.sha256(path.encode() + b"\0")
    digest.update(content)
    return digest.hexdigest()[:32]


def _scan(items: list[tuple[str, bytes]], scanner: Scanner) -> dict[str, ScannedFile]:
    workers = min(_cpus() - 1, 4)
    if len(items) < PARALLEL_MIN_FILES or workers < 2:
        return {path: scanner(content, path) for path, content in items}
    chunks = [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]
    results: dict[str, ScannedFile] = {}
    # Loaded only here: multiprocessing's import costs a warm run a quarter of its time.
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        for outcome in pool.map(_scan_chunk, chunks, [scanner] * len(chunks)):
            if isinstance(outcome, tuple):
                raise ConfigError(outcome[0], hint=outcome[1])
            results.update(outcome)
    return results


def _cpus() -> int:
    """CPUs this process may use. Workers pay off only beside the main process, which reads
    and hashes meanwhile: on 2 CPUs (benchmarks/lint.py, a shared 2-core machine) 4 workers
    made a cold 3,600-file scan slower (1.9 s against 1.7 s)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _scan_chunk(
    items: list[tuple[str, bytes]], scanner: Scanner
) -> dict[str, ScannedFile] | tuple[str, str | None]:
    """One worker's share; a ConfigError travels back as (message, hint)."""
    try:
        return {path: scanner(content, path) for path, content in items}
    except ConfigError as problem:
        return problem.message, problem.hint


class _Store:
    def __init__(self, root: Path) -> None:
        name = hashlib.blake2b(str(root.resolve()).encode(), digest_size=8).hexdigest()
        self.path = cache_dir() / "lint" / f"{name}.json"
        document = self._load()
        entries, stats = document.get("entries"), document.get("stats")
        self.entries: dict[str, Any] = entries if isinstance(entries, dict) else {}
        self.stats: dict[str, Any] = stats if isinstance(stats, dict) else {}
        written = document.get("written_ns")
        self.written_ns = written if isinstance(written, int) else 0

    def _load(self) -> dict[str, Any]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        valid = isinstance(document, dict) and document.get("format") == FORMAT
        return document if valid else {}

    def trusted_key(self, path: str, stat: tuple[int, int] | None) -> str | None:
        """The recorded hash of `path` when its size and mtime say it is unchanged."""
        recorded = self.stats.get(path)
        if stat is None or not isinstance(recorded, list) or len(recorded) != 3:
            return None
        size, mtime, key = recorded
        trusted = (size, mtime) == stat and mtime < self.written_ns - TRUST_AGE_NS
        return key if trusted and isinstance(key, str) else None

    def get(self, key: str) -> ScannedFile | None:
        data = self.entries.get(key)
        if data is None:
            return None
        try:
            return _decode(data)
        except (KeyError, TypeError, ValueError):
            del self.entries[key]  # a damaged entry is rescanned and rewritten
            return None

    def save(
        self, scanned: dict[str, ScannedFile], stats: dict[str, list[int]], keys: dict[str, str]
    ) -> None:
        entries = {key: self.entries.get(key) or _encode(found) for key, found in scanned.items()}
        recorded = {path: [*stat[:2], keys[path]] for path, stat in stats.items()}
        if entries == self.entries and recorded == self.stats:
            return
        document = {
            "format": FORMAT,
            "written_ns": time.time_ns(),
            "entries": entries,
            "stats": recorded,
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                # dumps, not dump: json.dump streams through the pure-Python encoder.
                out.write(json.dumps(document, separators=(",", ":")))
            os.replace(temporary, self.path)
        except OSError:
            pass  # a read-only or full cache directory only costs speed


def _encode(scanned: ScannedFile) -> dict[str, Any]:
    return {
        "path": scanned.path,
        "has_main": scanned.has_main,
        # vars(), not asdict(): the fields are flat, and asdict deep-copies each one.
        "registrations": [dict(vars(r)) for r in scanned.registrations],
        "findings": [{**vars(f), "severity": f.severity.value} for f in scanned.findings],
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

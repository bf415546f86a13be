"""What the workflows dispatch, cached by the hash of every workflow file and the settings.

Reading workflows with positions and following every step's script costs far more than
the result: sglang has 83 workflow files, 20,000 lines. The result depends on all of them together
(callers resolve reusable workflows), so one entry is kept per repository root, keyed by
the hash of every (path, text) and the suite runners; JSON, as the scan cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kl_bitexact.registry import scancache
from kl_bitexact.registry.shell import Checkout
from kl_bitexact.registry.workflows import (
    DirectRun,
    Dispatch,
    MatrixTarget,
    SuiteGlob,
    Unresolved,
    Workflows,
)

FORMAT = "workflows-v4"


class Recording:
    """A checkout that remembers what was asked of it: the wrapper scripts read (by the hash
    of their text) and the paths probed, so a cached result is used only while every
    answer is still the same."""

    def __init__(self, checkout: Checkout) -> None:
        self.checkout = checkout
        self.texts: dict[str, str | None] = {}
        self.files: dict[str, bool] = {}
        self._read: dict[str, str | None] = {}

    def text(self, path: str) -> str | None:
        if path not in self._read:
            self._read[path] = self.checkout.text(path)
            self.texts[path] = _digest(self._read[path])
        return self._read[path]

    def is_file(self, path: str) -> bool:
        if path not in self.files:
            self.files[path] = self.checkout.is_file(path)
        return self.files[path]

    def still_true(self, probes: Any) -> bool:
        texts, files = probes["texts"], probes["files"]
        return all(_digest(self.checkout.text(p)) == d for p, d in texts.items()) and all(
            self.checkout.is_file(p) == bool(b) for p, b in files.items()
        )


def _digest(text: str | None) -> str | None:
    if text is None:
        return None
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def cached(
    root: Path,
    texts: Sequence[tuple[str, str]],
    runners: Sequence[str],
    compute: Callable[[Checkout], Workflows],
    checkout: Checkout,
) -> Workflows:
    digest = hashlib.blake2b(digest_size=16)
    for part in (FORMAT, *runners, *(item for pair in texts for item in pair)):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    key = digest.hexdigest()
    name = hashlib.blake2b(str(root.resolve()).encode(), digest_size=8).hexdigest()
    path = scancache.cache_dir() / "lint" / f"{name}-workflows.json"
    recording = Recording(checkout)
    found = _load(path, key, recording)
    if found is not None:
        return found
    result = compute(recording)
    _save(path, key, result, {"texts": recording.texts, "files": recording.files})
    return result


def _load(path: Path, key: str, recording: Recording) -> Workflows | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or document.get("key") != key:
            return None
        if not recording.still_true(document["probes"]):
            return None  # a wrapper script changed, or a probed path appeared or went
        return _decode(document["workflows"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing or damaged: computed again


def _save(path: Path, key: str, found: Workflows, probes: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        entry = {"key": key, "probes": probes, "workflows": _encode(found)}
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(json.dumps(entry, default=_sets))
        os.replace(temporary, path)
    except OSError:
        pass  # an unwritable cache only costs speed


def _sets(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    raise TypeError(type(value).__name__)


def _encode(found: Workflows) -> dict[str, Any]:
    # vars(), not asdict(): the fields are flat (frozensets at most), and asdict copies
    # each one recursively (a tenth of the time of a cold lint's workflow step).
    return {
        "dispatches": [dict(vars(item)) for item in found.dispatches],
        "globs": [dict(vars(item)) for item in found.globs],
        "runner_configs": sorted(found.runner_configs),
        "targets": [dict(vars(item)) for item in found.targets],
        "unresolved": [dict(vars(item)) for item in found.unresolved],
        "direct": [dict(vars(item)) for item in found.direct],
    }


def _decode(data: dict[str, Any]) -> Workflows:
    targets = []
    for item in data["targets"]:
        sets = ("stages", "runner_configs", "suites", "backends", "nightly")
        values: dict[str, Any] = {k: frozenset(v) if k in sets else v for k, v in item.items()}
        targets.append(MatrixTarget(**values))
    return Workflows(
        tuple(Dispatch(**item) for item in data["dispatches"]),
        tuple(SuiteGlob(**item) for item in data["globs"]),
        frozenset(data["runner_configs"]),
        tuple(targets),
        tuple(Unresolved(**item) for item in data["unresolved"]),
        tuple(DirectRun(**item) for item in data["direct"]),
    )

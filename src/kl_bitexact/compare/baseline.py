"""The base branch's results, or the reason there are none.

A missing or unreadable baseline is reported as such ("baseline unavailable: ..."), never
read as an empty run, and never stops the report: the head's own verdicts still stand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results


@dataclass(frozen=True)
class Baseline:
    results: Results | None = None
    unavailable: str = "no baseline given"  # why `results` is None

    @classmethod
    def of(cls, base: Results | None) -> Baseline:
        return cls() if base is None else cls(base, "")


def load(path: Path | None) -> Baseline:
    """The baseline at `path`; a missing file or another schema version is a reason."""
    if path is None:
        return Baseline()
    if not path.exists():
        return Baseline(None, f"{path} does not exist (no successful run on the base branch?)")
    try:
        return Baseline.of(results_io.load(path))
    except ConfigError as error:
        return Baseline(None, error.message)

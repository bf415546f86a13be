"""The bit-exact checks, each a plain function `run(phases, spec, test_id) -> TestResult`.

Every check is a short plan of phases against `engines.base.Engine`, the cold ones
through `phases.Phases` so checks of one suite share them; scoring and the
verdict are shared (`scoring.py`), the numbers are pure (`metrics.py`). A transport
failure raises `errors.EngineError`; the caller decides what becomes of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from msgspec import structs

from kl_bitexact.results.model import TestResult
from kl_bitexact.run.checks import (
    abandoned_prefix_reuse,
    decode_cache_hit,
    match,
    prefill_cache_hit,
)
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Engine
from kl_bitexact.suite.model import CheckName, TestSpec

Check = Callable[[Phases, TestSpec, "str | None"], TestResult]


def _multiturn(phases: Phases, spec: TestSpec, test_id: str | None) -> TestResult:
    """Multi-turn flows and their cache rules load for a suite that has such a test: the
    other checks' runs do not pay for importing them."""
    from kl_bitexact.run.checks import multiturn

    return multiturn.run(phases, spec, test_id)


def _pressure_restore(phases: Phases, spec: TestSpec, test_id: str | None) -> TestResult:
    """Loaded for a suite that has such a test, as multi-turn is (it draws its prompts
    with numpy, which a run of the other checks on a prompts file never imports)."""
    from kl_bitexact.run.checks import pressure_restore

    return pressure_restore.run(phases, spec, test_id)


def _concurrent_prefix_hit(phases: Phases, spec: TestSpec, test_id: str | None) -> TestResult:
    """Loaded for a suite that has such a test, as pressure_restore is."""
    from kl_bitexact.run.checks import concurrent_prefix_hit

    return concurrent_prefix_hit.run(phases, spec, test_id)


# One per CheckName (tests/run/test_registries.py holds them equal).
CHECKS: dict[CheckName, Check] = {
    CheckName.MATCH: match.run,
    CheckName.PREFILL_CACHE_HIT: prefill_cache_hit.run,
    CheckName.DECODE_CACHE_HIT: decode_cache_hit.run,
    CheckName.MULTITURN: _multiturn,
    CheckName.PRESSURE_RESTORE: _pressure_restore,
    CheckName.ABANDONED_PREFIX_REUSE: abandoned_prefix_reuse.run,
    CheckName.CONCURRENT_PREFIX_HIT: _concurrent_prefix_hit,
}


def run_check(
    engine: Engine, spec: TestSpec, test_id: str | None = None, phases: Phases | None = None
) -> TestResult:
    """Run the check `spec.check` names; `phases` (over `engine`) shares cold phases
    with earlier checks of the suite, none when omitted."""
    phases = phases or Phases(engine)
    phases.scored = ()
    result = CHECKS[spec.check](phases, spec, test_id)
    said = server_warnings(engine.server_info())
    return structs.replace(result, warnings=(*result.warnings, *said)) if said else result


# A server's own warnings are its text: a few, each one line of bounded length.
MAX_SERVER_WARNINGS = 8
MAX_WARNING_CHARS = 500


def server_warnings(info: Mapping[str, Any]) -> tuple[str, ...]:
    """What the server says makes its checks meaningless (the reference engine's
    `inactive_faults`: a fault its own flags keep from acting), for every test it runs."""
    said = info.get("inactive_faults")
    if not isinstance(said, list):
        return ()
    texts = [text for text in said if isinstance(text, str)][:MAX_SERVER_WARNINGS]
    return tuple(f"server: {text[:MAX_WARNING_CHARS]}" for text in texts)

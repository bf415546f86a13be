"""explore under pressure: workloads that fill the reported device pool, so cached pages
are evicted to the host tier and restored; the restore-after-eviction fault found, shrunk
and handed back as a `pressure_restore` test (real processes), and the pure parts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from explore_unittest import assert_unittest_fails_only_on
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from kl_bitexact.explore import pressure
from kl_bitexact.explore.geometry import Geometry, read_geometry
from kl_bitexact.explore.strategy import workloads
from kl_bitexact.explore.workload import Pressure, Workload

Cli = Callable[..., subprocess.CompletedProcess[str]]
TIGHT_POOL = [
    "--enable-deterministic-inference",
    "--page-size",
    "16",
    "--mamba-track-interval",
    "16",
    "--enable-hierarchical-cache",
    "--max-total-tokens",
    "512",
    "--hicache-ratio",
    "64",
]
FAULT = ["--fault", "restore-after-eviction"]


def _explore(cli: Cli, url: str, out: Path, budget: int, seed: int = 1) -> dict[str, Any]:
    args = ["explore", "--base-url", url, "--budget", str(budget), "--seed", str(seed)]
    # One fault: stop at its first finding rather than search on for the rest of the budget.
    done = cli([*args, "--out", str(out), "--max-findings", "1"], timeout=300)
    return {
        "rc": done.returncode,
        "stderr": done.stderr,
        **json.loads((out / "results.json").read_text()),
    }


def test_pressure_finds_the_faulty_restore_and_hands_back_a_pressure_restore_test(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    faulty = reference_server(*TIGHT_POOL, *FAULT)
    healthy = reference_server(*TIGHT_POOL)
    found = _explore(cli, faulty.url, tmp_path / "out", budget=40)
    assert found["rc"] == 1, found["stderr"]
    [finding] = found["findings"]
    assert any("pressure" in step for step in finding["workload"]), finding["workload"]
    assert finding["requests"] <= 6 and finding["deterministic"], finding["workload"]
    assert "restored from the host tier" in finding["divergence"]["located"]
    assert finding["handback_fails"], finding["handback"]
    suite = tmp_path / "out" / finding["suite_file"]
    assert "check: pressure_restore" in suite.read_text()
    ran = [
        cli(["run", str(suite), "--base-url", s.url, "--out", str(tmp_path / n)])
        for s, n in ((faulty, "f"), (healthy, "h"))
    ]
    assert [r.returncode for r in ran] == [1, 0], ran[1].stdout
    assert_unittest_fails_only_on(
        tmp_path / "out" / finding["unittest_file"], faulty.url, healthy.url
    )


def test_a_healthy_server_under_pressure_reports_nothing(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    result = _explore(cli, reference_server(*TIGHT_POOL).url, tmp_path / "out", budget=8)
    assert result["rc"] == 0 and result["findings"] == [], result["stderr"]
    assert result["geometry"]["max_total_tokens"] == 512 and result["notes"] == []
    # Nothing found, and the pressure did what it is for: hits came back from the host tier.
    assert result["restored_from_host"] > 0
    # The reference engine reports every hit, so every hit was judged.
    assert result["requests"] > 0 and result["hits_unreported"] == 0


def test_a_pool_too_large_to_fill_is_said_and_not_pressed(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    roomy = reference_server("--enable-deterministic-inference")  # 65536 tokens by default
    result = _explore(cli, roomy.url, tmp_path / "out", budget=3)
    assert result["rc"] == 0
    [note] = result["notes"]
    assert "device pool (65536 tokens) is over 16384: no pressure is sent" in note
    assert "no pressure is sent" in result["stderr"]


def test_the_pool_is_read_as_sglang_reports_it() -> None:
    assert read_geometry({"page_size": 1, "max_total_tokens": 512}, "x").pool_tokens == 512
    scheduler = {"page_size": 1, "internal_states": [{"max_total_num_tokens": 900}]}
    assert read_geometry(scheduler, "x").pool_tokens == 900
    assert read_geometry({"page_size": 1}, "x").pool_tokens is None
    assert "does not report its device pool" in str(
        pressure.unfillable(Geometry(1, None, None, None, 256, True))
    )


@given(st.integers(1, pressure.MAX_POOL_TOKENS), st.integers(*pressure.QUARTERS))
def test_pressure_fills_its_share_of_the_pool_in_bounded_prompts(pool: int, quarters: int) -> None:
    geometry = Geometry(16, None, None, None, 256, True, pool_tokens=pool)
    lengths = pressure.prompt_lengths(geometry, quarters)
    assert sum(lengths) == -(-pool * quarters // 4)
    assert all(1 <= n <= pressure.PROMPT_TOKENS for n in lengths)


def _pressed(workload: Workload) -> bool:
    return any(isinstance(step, Pressure) for step in workload.steps)


def test_pressure_steps_are_generated_for_a_pool_it_can_fill() -> None:
    geometry = Geometry(16, 16, 64, 32, 256, True, pool_tokens=512, host_tier=True)
    quick = settings(phases=[Phase.generate], database=None)  # found, not shrunk
    assert _pressed(find(workloads(geometry, 49), _pressed, settings=quick))


@settings(max_examples=40)
@given(st.data())
def test_no_pressure_for_a_pool_it_cannot_fill(data: st.DataObject) -> None:
    for pool in (None, pressure.MAX_POOL_TOKENS + 1):
        geometry = Geometry(16, 16, 64, 32, 256, True, pool_tokens=pool, host_tier=True)
        assert not _pressed(data.draw(workloads(geometry, 49)))

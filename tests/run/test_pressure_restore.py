"""`pressure_restore` against real reference servers: a shared prefix evicted to the host
tier by pressure and reused; red only where the restore is faulty, and never a pass that
saw no restore."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.run.checks.pressure_restore import not_restored
from kl_bitexact.run.engines.base import Generation
from kl_bitexact.suite import load as suite

Cli = Callable[..., subprocess.CompletedProcess[str]]
HOST_TIER = [
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
SUITE = """
- name: pressure
  server: {engine: sglang, base_url: URL}
  tests:
    - name: restore
      check: pressure_restore
      groups: 2
      branches: 2
      prefix_tokens: 64
      turn_suffix_tokens: [40]
      max_new_tokens: 8
      vocab_size: 256
      exact: true
      PRESSURE
"""


def _run(
    cli: Cli, url: str, tmp_path: Path, pressure: float = 1.5, gate: str = ""
) -> dict[str, Any]:
    path = tmp_path / f"{abs(hash((url, pressure)))}.yaml"
    options = f"pressure: {pressure}" + (f"\n      {gate}" if gate else "")
    path.write_text(SUITE.replace("URL", url).replace("PRESSURE", options))
    out = tmp_path / path.stem
    done = cli(["run", str(path), "--out", str(out)])
    [test] = json.loads((out / "results.json").read_text())["suites"][0]["tests"]
    return {"rc": done.returncode, **test}


def test_red_on_a_faulty_restore_and_green_on_a_healthy_one(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    healthy = _run(cli, reference_server(*HOST_TIER).url, tmp_path)
    assert healthy["rc"] == 0 and healthy["status"] == "passed", healthy["message"]
    assert healthy["cache_hits"]["hit"] == 2 and healthy["exact"]["tokens"] == 16
    faulty_server = reference_server(*HOST_TIER, "--fault", "restore-after-eviction")
    faulty = _run(cli, faulty_server.url, tmp_path)
    assert faulty["rc"] == 1 and faulty["status"] == "failed"
    assert "logprobs differ" in faulty["message"] and faulty["exact"]["mismatched"] > 0


def test_under_gate_noise_floor_it_is_judged_by_its_probes_floor(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A server that is not deterministic (plain float32): the probes generated again with
    no cache are the floor, so the healthy server passes and the faulty restore fails."""
    plain = [flag for flag in HOST_TIER if flag != "--enable-deterministic-inference"]
    gate = "gate: noise-floor"
    healthy = _run(cli, reference_server(*plain).url, tmp_path, gate=gate)
    assert healthy["rc"] == 0 and healthy["status"] == "passed", healthy["message"]
    assert healthy["noise_floor"]["factor"] == 4.0 and healthy["noise_floor"]["kl"] is not None
    faulty_server = reference_server(*plain, "--fault", "restore-after-eviction")
    faulty = _run(cli, faulty_server.url, tmp_path, gate=gate)
    assert faulty["rc"] == 1 and faulty["status"] == "failed"
    assert "noise floor" in faulty["message"], faulty["message"]


def test_no_host_tier_is_not_run_saying_why(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    flat = reference_server("--enable-deterministic-inference", "--max-total-tokens", "512")
    result = _run(cli, flat.url, tmp_path)
    assert result["rc"] != 0 and result["status"] == "not_run"  # it gates
    assert "no host tier" in result["message"]


def test_a_hit_not_shown_restored_from_the_host_proves_nothing() -> None:
    def hit(host: int | None) -> Generation:
        return Generation((5,), (-1.0,), cached_tokens=64, prompt_tokens=104, cached_from_host=host)

    unsaid, device = not_restored([hit(None), hit(0), hit(64)], [0, 1, 2])
    assert unsaid.startswith("probe 0: the server does not report cached_tokens_details.host")
    assert device.startswith("probe 1: cached 64 tokens, none from the host tier")


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("      groups: 2\n", "      groups: 2\n      samples: 3\n", "samples: does not apply"),
        ("      branches: 2\n", "      branches: 1\n", "branches: expected an integer >= 2"),
        ("PRESSURE", "pressure: 9", "pressure: expected a number between 1.0 and 4.0"),
        ("PRESSURE", "cache_assert: mamba", "cache_assert: does not apply"),
    ],
)
def test_bad_shapes_are_refused_by_name(old: str, new: str, said: str) -> None:
    text = SUITE.replace("URL", "http://127.0.0.1:1").replace(old, new)
    with pytest.raises(ConfigError) as caught:
        suite.parse(text.replace("PRESSURE", "pressure: 1.5"), source="s.yaml")
    assert f"tests[0].{said}" in caught.value.message


def test_pressure_does_not_apply_to_other_checks() -> None:
    text = SUITE.replace("URL", "http://127.0.0.1:1").replace("PRESSURE", "pressure: 2")
    text = text.replace("check: pressure_restore", "check: multiturn")
    with pytest.raises(ConfigError, match=r"pressure: does not apply"):
        suite.parse(text, source="s.yaml")

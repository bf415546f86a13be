"""The noise-floor gate against real llama-server processes (issue 31), on CPU.

llama.cpp with default flags is not batch-invariant: a decode step rounds differently from
the prefill that replays it. Its cache adds little to that drift, so the noise-floor gate
passes it where `exact` fails; a cache fault provoked from outside (tests/helpers/
poison_proxy.py: every request that may hit the cache resumes from KV another model wrote)
fails both gates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_server import default_command, running_command
from poison_proxy import poisoning
from tiny_llama_gguf import write_tiny_llama

pytestmark = pytest.mark.timeout(1800)

SHAPE = {"check": "prefill_cache_hit", "samples": 4, "prompt_tokens": [24, 40]}
TESTS = [
    {"name": "noise-floor", "gate": "noise-floor", "max_new_tokens": 8, **SHAPE},
    {"name": "exact", "exact": True, "max_new_tokens": 8, **SHAPE},
]


def run(cli: Any, workdir: Path, url: str) -> dict[str, dict[str, Any]]:
    suite = {
        "name": "llamacpp",
        "server": {"engine": "openai", "dialect": "llamacpp", "base_url": url},
        "tests": TESTS,
    }
    (workdir / "suite.yaml").write_text(json.dumps(suite), encoding="utf-8")
    out = workdir / "out"
    done = cli(["run", str(workdir / "suite.yaml"), "--out", str(out)], timeout=600)
    print(done.stdout)  # pytest -s: the figures
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return {test["id"].split("::")[1]: test for test in results["suites"][0]["tests"]}


def test_llama_server_drift_passes_the_noise_floor_and_a_cache_fault_fails_it(
    tmp_path: Path, cli: Any
) -> None:
    slots = tmp_path / "slots"
    slots.mkdir()
    save = ["--slot-save-path", f"{slots}/"]
    model = write_tiny_llama(tmp_path / "model.gguf", seed=0)
    other = write_tiny_llama(tmp_path / "other.gguf", seed=1)
    for name in ("a", "b", "healthy", "fault"):
        (tmp_path / name).mkdir()
    a_command = [*default_command(model, 1), *save]
    b_command = [*default_command(other, 1), *save]
    with running_command(a_command, tmp_path / "a") as a:
        healthy = run(cli, tmp_path / "healthy", a)
        with running_command(b_command, tmp_path / "b") as b, poisoning(a, b) as proxy:
            fault = run(cli, tmp_path / "fault", proxy.url)
    assert proxy.poisoned == 2 * 4  # each test's 4 cached requests
    # Healthy: every cached logprob differs (exact fails), the drift is the floor's.
    assert healthy["exact"]["status"] == "failed", healthy["exact"]["message"]
    assert healthy["noise-floor"]["status"] == "passed", healthy["noise-floor"]["message"]
    floor = healthy["noise-floor"]["noise_floor"]
    assert floor["kl"] > 0 and floor["factor"] == 4.0 and floor["ratio"] < 4
    # Another model's KV behind every hit: both gates fail, far above the floor.
    for test in fault.values():
        assert test["status"] == "failed", test["message"]
        assert test["cache_hits"]["hit"] == 4 and test["noise_floor"]["ratio"] > 1e6
    assert "> 4 x noise floor" in fault["noise-floor"]["message"]

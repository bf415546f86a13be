"""The base as the reference (issues 41 and 36.4), on real llama-server processes (CPU).

llama.cpp with default flags is not batch-invariant, yet it repeats its numbers bit for
bit from run to run and launch to launch. So the base's own numbers judge a cache test:
- the base is run with `--repeat 2`, which measures that determinism;
- a healthy relaunch of the same flags is identical to the base (`report` exit 0);
- a cache fault small enough to pass the floor rule (KV written by the same model with its
  K/V weights moved by 3e-8 relative, restored through tests/helpers/poison_proxy.py) is
  caught against the base: the floor is bit-identical, the cache KL is not (exit 1);
- the same fault on a noisier launch (CPU flash attention on: a floor many times larger)
  passes the floor rule outright, and is caught as "the engine got noisier".
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

TEST = {
    "name": "prefill",
    "check": "prefill_cache_hit",
    "gate": "noise-floor",
    "samples": 4,
    "prompt_tokens": [24, 40],
    "max_new_tokens": 8,
}
FAULT_EPS = 3e-8


def run(cli: Any, workdir: Path, url: str, *extra: str) -> dict[str, Any]:
    """`kl-bitexact run` of the one test against `url`; its result."""
    workdir.mkdir()
    suite = {
        "name": "llamacpp",
        "server": {"engine": "openai", "dialect": "llamacpp", "base_url": url},
        "tests": [TEST],
    }
    (workdir / "suite.yaml").write_text(json.dumps(suite), encoding="utf-8")
    out = workdir / "out"
    done = cli(["run", str(workdir / "suite.yaml"), "--out", str(out), *extra], timeout=600)
    print(done.stdout)  # pytest -s: the figures
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    test: dict[str, Any] = results["suites"][0]["tests"][0]
    return test


def report(cli: Any, head: Path, base: Path) -> tuple[int, dict[str, Any]]:
    """`kl-bitexact report` of `head` against `base`: exit code and the test's entry."""
    results = [str(head / "out" / "results.json"), "--baseline", str(base / "out/results.json")]
    done = cli(["report", *results, "--json"])
    print(done.stdout[-3000:], done.stderr[-2000:])
    entry: dict[str, Any] = json.loads(done.stdout)["tests"][0]
    return done.returncode, entry


def test_the_base_catches_what_the_floor_rule_lets_through(tmp_path: Path, cli: Any) -> None:
    slots = tmp_path / "slots"
    slots.mkdir()
    save = ["--slot-save-path", f"{slots}/"]
    model = write_tiny_llama(tmp_path / "model.gguf", seed=0)
    moved = write_tiny_llama(tmp_path / "moved.gguf", seed=0, perturb=FAULT_EPS)
    for name in ("a", "a2", "b", "noisy"):
        (tmp_path / name).mkdir()
    a_command = [*default_command(model, 1), *save]
    b_command = [*default_command(moved, 1), *save]
    with running_command(a_command, tmp_path / "a") as a:
        base = run(cli, tmp_path / "base", a, "--repeat", "2")
    with running_command(a_command, tmp_path / "a2") as a2:
        healthy = run(cli, tmp_path / "healthy", a2)
        with running_command(b_command, tmp_path / "b") as b, poisoning(a2, b) as proxy:
            fault = run(cli, tmp_path / "fault", proxy.url)
    assert proxy.poisoned == 4  # the test's 4 cached requests
    # Flash attention lays the KV out otherwise: B must run it too for A to restore B's slot.
    noisy_a, noisy_b = _flash_attention_on(a_command), _flash_attention_on(b_command)
    with (
        running_command(noisy_a, tmp_path / "noisy") as noisy,
        running_command(noisy_b, tmp_path / "b") as b,
        poisoning(noisy, b) as proxy,
    ):
        noisier = run(cli, tmp_path / "noisier", proxy.url)
    assert proxy.poisoned == 4

    # The base measured its determinism: two repeats, bit for bit.
    assert base["repeats"]["changed"] == 0 and len(set(base["repeats"]["floors"])) == 1
    floor = base["noise_floor"]["kl"]
    assert floor > 0 and base["status"] == "passed"

    # A healthy relaunch: identical to its base, bit for bit.
    assert healthy["kl_div"] == base["kl_div"] and healthy["noise_floor"]["kl"] == floor
    code, entry = report(cli, tmp_path / "healthy", tmp_path / "base")
    assert code == 0 and entry["against_base"]["finding"] == "identical", entry
    assert entry["against_base"]["determinism"] == "deterministic"

    # The fault: inside the floor rule's 4x, the floor bit-identical, the cache KL not.
    assert fault["status"] == "passed", fault["message"]
    assert fault["noise_floor"]["ratio"] < 4 and fault["noise_floor"]["kl"] == floor
    assert fault["kl_div"] != base["kl_div"]
    code, entry = report(cli, tmp_path / "fault", tmp_path / "base")
    assert code == 1 and entry["gating"] and entry["verdict"] == "regression", entry
    assert entry["against_base"]["finding"] == "cache_changed"

    # Issue 36.4: a noisier launch with the same fault passes the floor rule on its own.
    assert noisier["status"] == "passed", noisier["message"]
    assert noisier["noise_floor"]["kl"] > 2 * floor
    code, entry = report(cli, tmp_path / "noisier", tmp_path / "base")
    assert code == 1 and entry["gating"], entry
    assert "the engine got noisier" in entry["against_base"]["noisier"]
    print(
        f"floor {floor!r}; base cache KL {base['kl_div']!r} "
        f"({base['noise_floor']['ratio']:.3g}x); healthy relaunch {healthy['kl_div']!r}; "
        f"fault {fault['kl_div']!r} ({fault['noise_floor']['ratio']:.3g}x); noisier launch "
        f"floor {noisier['noise_floor']['kl']!r}, cache KL {noisier['kl_div']!r} "
        f"({noisier['noise_floor']['ratio']:.3g}x)"
    )


def _flash_attention_on(command: list[str]) -> list[str]:
    """The same launch with CPU flash attention on: the same model, a wider drift."""
    index = command.index("-fa")
    return [*command[:index], "-fa", "on", *command[index + 2 :]]

"""explore sends batches apart and hangs up on requests mid-prefill (real sockets, real
processes), finds reuse-after-abandoned-prefill, shrinks it and hands back a test of the
abandoned_prefix_reuse kind, and an sglang-style unittest file that hangs up itself, each
failing only on the faulty server."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from explore_unittest import assert_unittest_fails_only_on

from kl_bitexact.explore.workload import ABANDONED, APART, Batch, Flush, Prompt, Workload, smaller
from kl_bitexact.run.engines.base import SamplingParams
from kl_bitexact.run.engines.sglang import SglangEngine

GEOMETRY = ["--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16"]
FAULT = ["--fault", "reuse-after-abandoned-prefill"]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_explore_hangs_up_finds_the_abandoned_prefill_fault_and_hands_back_its_check(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    faulty = reference_server(*GEOMETRY, *FAULT)
    healthy = reference_server(*GEOMETRY)
    out = tmp_path / "out"
    found = cli(
        ["explore", "--base-url", faulty.url, "--budget", "40", "--seed", "1", "--out", str(out),
         "--no-examples-db", "--max-findings", "1"],
        timeout=300,
    )  # fmt: skip
    assert found.returncode == 1, found.stderr
    assert "explore: batches sent together, abandoned" in found.stderr
    assert "client disconnected after prefill chunk" in faulty.stderr()  # a real hang-up
    [finding] = json.loads((out / "results.json").read_text())["findings"]
    assert finding["requests"] <= 4, finding["workload"]
    assert any(step.get("sent") == "abandoned" for step in finding["workload"])
    assert "hung up on mid-prefill" in finding["divergence"]["located"]
    assert finding["deterministic"] and finding["handback_fails"], finding["handback"]
    assert "unittest_note" not in finding
    suite = out / finding["suite_file"]
    assert "check: abandoned_prefix_reuse" in suite.read_text()
    on_faulty = cli(["run", str(suite), "--base-url", faulty.url, "--out", str(tmp_path / "f")])
    on_healthy = cli(["run", str(suite), "--base-url", healthy.url, "--out", str(tmp_path / "h")])
    assert on_faulty.returncode == 1, on_faulty.stdout
    assert on_healthy.returncode == 0, on_healthy.stdout + on_healthy.stderr
    # The unittest file hangs up itself (its own socket), then reuses through sglang's helpers.
    test_file = out / finding["unittest_file"]
    assert '"abandoned": true' in test_file.read_text()
    hang_ups = faulty.stderr().count("client disconnected after prefill chunk")
    assert_unittest_fails_only_on(test_file, faulty.url, healthy.url)
    assert faulty.stderr().count("client disconnected after prefill chunk") > hang_ups


def test_leaving_out_a_prompt_keeps_how_its_batch_is_sent() -> None:
    one = Prompt(root=0, shared=0, own=95)
    workload = Workload(
        (
            Batch((one, one), 1, sent=ABANDONED),
            Flush(),
            Batch((Prompt(0, 0, 0, continues=0), one), 2, sent=APART),
        )
    )
    sents = {
        step.sent for smaller_one in smaller(workload) for step in smaller_one.steps
        if isinstance(step, Batch)
    }  # fmt: skip
    assert sents == {ABANDONED, APART}
    assert workload.abandoned and workload.as_list()[0]["sent"] == "abandoned"
    assert "sent" not in Workload((Batch((one,), 1),)).as_list()[0]


def test_concurrent_sends_batches_apart_and_a_healthy_server_reports_nothing(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    healthy = reference_server(*GEOMETRY)
    argv = ["explore", "--base-url", healthy.url, "--budget", "8", "--seed", "2"]
    done = cli([*argv, "--concurrent", "--out", str(tmp_path), "--no-examples-db"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "explore: batches sent together, abandoned, apart" in done.stderr


def test_prompts_sent_apart_are_answered_as_each_alone(
    reference_server: Callable[..., Any],
) -> None:
    """Separate connections at once (the reference engine serves them one at a time in
    whatever order they reach its lock), each answered as if sent by itself."""
    engine = SglangEngine(reference_server(*GEOMETRY).url, request_timeout=60)
    # Threads an earlier test's fake server left waiting on a hung client are not ours.
    threads_before = threading.active_count()
    prompts = [[5 + i] * (20 + 7 * i) for i in range(4)]
    params = SamplingParams(max_new_tokens=3, temperature=0.0, seed=0)
    apart = engine.generate_apart(prompts, params)
    engine.flush()
    alone = [engine.generate([prompt], params)[0] for prompt in prompts]
    engine.flush()
    assert [a.output_logprobs for a in apart] == [a.output_logprobs for a in alone]
    assert threading.active_count() == threads_before  # no thread left behind

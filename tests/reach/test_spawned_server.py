"""Reach through the runner, against a server laid out like sglang (HTTP in one process,
the engine in a child started with multiprocessing's spawn): each test records which of
its named functions ran and in which process; a server kl-bitexact did not launch, or a
test on one, says "reach not measured"."""

from __future__ import annotations

import sys
from pathlib import Path

from fake_suites import Silent

from kl_bitexact.reach.probe_dir import NOT_LAUNCHED
from kl_bitexact.results import verdict
from kl_bitexact.results.model import RanWhen, Status, TestResult
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite import load

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
IN_CHILD = "kl_bitexact.reference.engine:ReferenceEngine.generate"
IN_PARENT = "kl_bitexact.reference.http:Handler._generate"
AT_START = "kl_bitexact.reference.engine:ReferenceEngine.__init__"
NEVER = "kl_bitexact.reference.speculative:decode"


def suite_text(server: str, reach: tuple[str, ...]) -> str:
    return f"""
name: spawned
reach: [{IN_PARENT}]
server:
{server}
tests:
  - name: prefill
    check: prefill_cache_hit
    reach: [{", ".join(reach)}]
    samples: 4
    prompt_tokens: [40, 60]
    max_new_tokens: 8
    vocab_size: 256
  - name: no_names_of_its_own
    check: match
    samples: 2
    prompt_tokens: [20, 30]
    max_new_tokens: 4
    vocab_size: 256
"""


def launched() -> str:
    command = [sys.executable, str(HELPERS / "spawned_engine_server.py"), "--port", "{port}"]
    command += ["--enable-deterministic-inference", "--page-size", "16"]
    return "  engine: sglang\n  command: [" + ", ".join(f'"{c}"' for c in command) + "]"


def results(tmp_path: Path, server: str) -> dict[str, TestResult]:
    [spec] = load.parse(
        suite_text(server, (IN_CHILD, AT_START, NEVER)), source="s.yaml", base_dir=tmp_path
    )
    final = run_suites(Plan((spec,), tmp_path / "logs"), Silent(), lambda partial: None)
    return {test.id: test for _, test in final.all_tests()}


def test_probes_follow_the_spawned_engine_process(tmp_path):
    tests = results(tmp_path, launched())
    found = {name: test.reach for name, test in tests.items()}
    prefill = found["spawned::prefill"]
    assert prefill is not None and prefill.measured
    when = {f.name: f.when for f in prefill.functions}
    assert when == {
        IN_PARENT: RanWhen.TEST,
        IN_CHILD: RanWhen.TEST,
        AT_START: RanWhen.STARTUP,
        NEVER: RanWhen.NOT,
    }
    # The suite's `reach` is every test's: the second test names no function of its own.
    second = found["spawned::no_names_of_its_own"]
    assert second is not None and [f.name for f in second.functions] == [IN_PARENT]
    assert second.functions[0].when is RanWhen.TEST
    # A named function that never ran: the test did not test what it claims.
    assert tests["spawned::no_names_of_its_own"].status is Status.PASSED
    red = tests["spawned::prefill"]
    assert red.status is Status.NOT_EXERCISED and red.kl_div == 0.0
    assert red.message == (
        f"not exercised (the test did not test what it claims): {NEVER} never ran"
    )
    assert red.hint == verdict.REACH_HINT
    # Two processes ran what they ran: the HTTP one, and the spawned engine.
    logs = {log: log.read_text() for log in (tmp_path / "logs" / "reach").glob("*/hits-*.log")}
    [parent] = [text for text in logs.values() if f"hit\t1\t{IN_PARENT}" in text]
    [child] = [text for text in logs.values() if f"hit\t1\t{IN_CHILD}" in text]
    assert "--multiprocessing-fork" in child and f"hit\t1\t{IN_CHILD}" not in parent


def test_a_server_kl_bitexact_did_not_launch_says_reach_not_measured(tmp_path, reference_server):
    running = reference_server("--enable-deterministic-inference", "--page-size", "16")
    tests = results(tmp_path, f"  engine: sglang\n  base_url: {running.url}")
    prefill = tests["spawned::prefill"].reach
    assert prefill is not None and not prefill.measured
    assert prefill.why_not == NOT_LAUNCHED
    assert [f.name for f in prefill.unreached] == [IN_PARENT, IN_CHILD, AT_START, NEVER]
    # Never a silent pass: each test is not exercised, saying why.
    for test in tests.values():
        assert test.status is Status.NOT_EXERCISED
        assert test.message.endswith(NOT_LAUNCHED)

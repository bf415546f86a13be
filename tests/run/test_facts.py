"""Issue 35, item 1: a test's stated server facts, checked against what the server reports.

The property: a fact that does not hold, or that the server cannot tell, makes any claim
(passed, failed, flaky) `not_exercised`, which is never a pass, gates in `failure` and
`regression` mode whatever the test's blockers say, and is never called a regression of its
numbers. Then, against real reference servers: the bundled suites against a plain
`--base-url`, and a dropped knob (sglang PR 34356), each red with the reason in the terminal
and the comment, and green when fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from kl_bitexact.compare import gate
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results import strict, verdict
from kl_bitexact.results.model import (
    Fact,
    FactState,
    Results,
    RunInfo,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)
from kl_bitexact.run import facts
from kl_bitexact.run.engines.base import Reported
from kl_bitexact.suite import load as suite_file
from kl_bitexact.suite.model import Condition, Expect

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
CLAIMS = st.sampled_from([Status.PASSED, Status.FAILED, Status.FLAKY])


def _expect(name: str, value: Any, condition: Condition = Condition.EQUALS) -> Expect:
    return Expect(name, condition, json.dumps(value, sort_keys=True, separators=(",", ":")))


@given(
    name=st.text(min_size=1, max_size=10),
    stated=JSON,
    answer=st.dictionaries(st.text(max_size=10), JSON),
)
def test_a_fact_the_server_does_not_report_is_unknown_and_never_holds(name, stated, answer):
    answer.pop(name, None)
    if "." in name:  # a dotted name may reach into the answer; keep it out of reach
        answer.pop(name.split(".")[0], None)
    [fact] = facts.check([_expect(name, stated)], Reported("GET /server_info", answer))
    assert fact.state is FactState.UNKNOWN and not fact.holds and fact.reported is None
    assert name in fact.failure() and "did not report it" in fact.failure()


@given(stated=JSON, said=JSON)
def test_a_fact_holds_exactly_when_the_reported_value_equals_it_as_json(stated, said):
    [fact] = facts.check([_expect("k", stated)], Reported("GET /x", {"k": said}))
    same = json.dumps(stated, sort_keys=True) == json.dumps(said, sort_keys=True)
    assert fact.holds is same
    assert fact.state is (FactState.HOLDS if same else FactState.DIFFERS)


@given(
    claim=CLAIMS,
    states=st.lists(st.sampled_from(list(FactState)), min_size=1, max_size=4),
    blockers=st.lists(st.sampled_from(list(BlockerState)), max_size=2),
    kl=st.none() | st.floats(0, 1),
)
def test_any_claim_with_a_fact_that_does_not_hold_is_not_exercised_and_gates(
    claim, states, blockers, kl
):
    stated = tuple(Fact(f"f{i}", "true", state) for i, state in enumerate(states))
    test = TestResult("s::t", "match", claim, kl_div=kl, kl_threshold=1e-9, facts=stated)
    status, reasons = verdict.judge(test, planned=True)
    if all(fact.holds for fact in stated):
        assert status is not Status.NOT_EXERCISED
        return
    assert status is Status.NOT_EXERCISED
    assert [r.split(":")[0] for r in reasons] == [f.name for f in stated if not f.holds]
    judged, lied = verdict.judged(test, planned=True)
    assert judged.status is Status.NOT_EXERCISED and not lied
    assert judged.message.startswith("not exercised")
    found = gate.verdict(judged, blockers)
    assert found is gate.Verdict.NOT_EXERCISED  # whatever the blockers say
    for mode in (gate.FailOn.REGRESSION, gate.FailOn.FAILURE):
        assert gate.gates(found, judged, gate.Policy(fail_on=mode))
    assert not gate.gates(found, judged, gate.Policy(fail_on=gate.FailOn.NEVER))
    assert gate.by_base(found, judged, None, True) is gate.Verdict.NOT_EXERCISED


def test_not_exercised_is_a_verdict_of_its_own_exit_1_never_could_not_run():
    decision = gate.decide({gate.Verdict.NOT_EXERCISED: 2}, 0 + 2, gate.Policy())
    assert not decision.passed and int(decision.exit_code) == 1
    assert decision.reasons == ("2 not exercised",)


def test_a_base_not_exercised_either_excuses_it_in_regression_mode_and_a_passing_one_not():
    fact = Fact("page_size", "16", FactState.DIFFERS, "128", "GET /server_info")
    head = TestResult("s::t", "match", Status.NOT_EXERCISED, facts=(fact,))
    passing_base = TestResult("s::t", "match", Status.PASSED)
    assert not gate.excused_by_base(gate.Verdict.NOT_EXERCISED, head, passing_base)
    assert gate.excused_by_base(gate.Verdict.NOT_EXERCISED, head, head)


def test_lookup_reaches_into_nested_answers_and_compares_as_json():
    answer = {
        "cuda_graph_config": {"prefill": {"backend": "breakable"}},
        "internal_states": [{"avg_spec_accept_length": 2.5}],
        "disable_radix_cache": False,
        "max_total_tokens": 512,
    }
    stated = [
        _expect("cuda_graph_config.prefill.backend", "breakable"),
        _expect("internal_states.0.avg_spec_accept_length", 1, Condition.AT_LEAST),
        _expect("disable_radix_cache", 0),  # JSON: false is not 0
        _expect("max_total_tokens", 512.0),
        _expect("max_total_tokens", 256, Condition.AT_MOST),
        _expect("speculative_algorithm", ["DSPARK"], Condition.ONE_OF),
    ]
    found = facts.check(stated, Reported("GET /server_info", answer))
    assert [f.state for f in found] == [
        FactState.HOLDS,
        FactState.HOLDS,
        FactState.DIFFERS,
        FactState.HOLDS,
        FactState.DIFFERS,
        FactState.UNKNOWN,
    ]
    assert found[4].failure() == (
        "max_total_tokens: expected at most 256, the server reported 512 (GET /server_info)"
    )


def test_facts_survive_results_json():
    fact = Fact("x.y", '"a"', FactState.UNKNOWN, None, "GET /props", "its answer has no `x.y`")
    test = TestResult("s::t", "match", Status.NOT_EXERCISED, facts=(fact,))
    results = Results(run=RunInfo(), suites=(SuiteResult("s", ServerInfo("sglang"), (test,)),))
    loaded = strict.decode(results_io.dumps(results).encode())
    [(_, back)] = loaded.all_tests()
    assert back == test


# --- suite files ------------------------------------------------------------------------

SUITE = """
name: s
server:
  engine: reference
  expect: {enable_hierarchical_cache: true, max_total_tokens: {at_most: 512}}
tests:
  - {name: a, check: match}
  - {name: b, check: match, expect: {max_total_tokens: 512, page_size: {one_of: [16, 32]}}}
"""


def test_a_test_adds_its_own_facts_over_its_suite_s():
    [suite] = suite_file.parse(SUITE, source="s.yaml")
    a, b = suite.tests
    assert [(e.name, e.condition, e.value) for e in a.expect] == [
        ("enable_hierarchical_cache", Condition.EQUALS, "true"),
        ("max_total_tokens", Condition.AT_MOST, "512"),
    ]
    assert [(e.name, e.condition, e.value) for e in b.expect] == [
        ("enable_hierarchical_cache", Condition.EQUALS, "true"),
        ("max_total_tokens", Condition.EQUALS, "512"),
        ("page_size", Condition.ONE_OF, "[16,32]"),
    ]


@pytest.mark.parametrize(
    ("expect", "says"),
    [
        ("[a]", "server.expect: expected a mapping of facts to values"),
        ("{x: {above: 1}}", "server.expect.x: a mapping states one condition"),
        ("{x: {at_most: big}}", "server.expect.x: at_most takes a number"),
        ("{x: {one_of: []}}", "server.expect.x: one_of takes a non-empty list"),
        ("{a..b: 1}", "server.expect: 'a..b' is not a fact's name"),
        ("{x: 2024-01-01}", "server.expect.x: date datetime.date(2024, 1, 1) is not a JSON value"),
    ],
)
def test_a_malformed_expect_names_the_file_the_key_and_what_to_write(expect, says):
    text = (
        f"name: s\nserver: {{engine: reference, expect: {expect}}}\n"
        "tests: [{name: t, check: match}]\n"
    )
    with pytest.raises(ConfigError) as raised:
        suite_file.parse(text, source="s.yaml")
    assert raised.value.message.startswith("s.yaml: ") and says in raised.value.message


# --- real servers -----------------------------------------------------------------------


def _tests(out: Path) -> dict[str, TestResult]:
    return {t.id: t for _, t in results_io.load(out / "results.json").all_tests()}


def test_the_bundled_suites_against_a_plain_base_url_are_red_saying_which_fact(
    cli, reference_server, tmp_path
):
    plain = reference_server()
    out = tmp_path / "out"
    result = cli(["run", "--base-url", plain.url, "--out", str(out), "--color", "never"])
    assert result.returncode == 1, result.stdout + result.stderr
    tests = _tests(out)
    assert {t.status for t in tests.values()} == {Status.NOT_EXERCISED}
    hicache = tests["reference-hicache::decode_cache_hit"]
    wrong = {f.name: f.reported for f in hicache.facts if not f.holds}
    assert wrong == {
        "enable_deterministic_inference": "false",
        "enable_hierarchical_cache": "false",
        "max_total_tokens": "65536",
    }
    said = "enable_hierarchical_cache: expected true, the server reported false (GET /server_info)"
    assert said in result.stdout and said in hicache.message
    assert 'speculative_algorithm: expected "DSPARK", the server reported null' in result.stdout
    comment = (out / "report.md").read_text()
    assert "gate failed: 8 not exercised" in comment
    assert "| 🚫 | <code>reference-hicache::decode&#95;cache&#95;hit</code>" in comment
    assert (
        "<code>enable&#95;hierarchical&#95;cache</code> | <code>true</code> | <code>false</code>"
        in comment
    )
    # Fixed: the servers started as the suites say them (kl-bitexact launches them, so their
    # reach is measured too: a server it did not launch can never show its functions ran).
    fixed = tmp_path / "fixed"
    result = cli(["run", "--out", str(fixed), "--select", "reference-radix::*"])
    assert result.returncode == 0, result.stdout + result.stderr
    for test in _tests(fixed).values():
        assert test.status is Status.PASSED and test.facts and all(f.holds for f in test.facts)


HICACHE = """
name: hicache
server:
  engine: reference
  args: [--enable-deterministic-inference, --enable-hierarchical-cache, {pool}]
  expect:
    enable_hierarchical_cache: true
    hicache_write_policy: write_through
    max_total_tokens: {{at_most: 512}}
tests:
  - {{name: decode, check: decode_cache_hit, samples: 4, prompt_tokens: [72, 140],
      max_new_tokens: 24, vocab_size: 256}}
"""


def test_a_dropped_knob_is_red_saying_which_fact_and_green_once_restored(cli, tmp_path):
    path = tmp_path / "hicache.yaml"
    # A later change drops the tight pool (sglang PR 34356: every knob is load bearing).
    path.write_text(HICACHE.format(pool="--hicache-ratio, '2'"))
    out = tmp_path / "out"
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 1, result.stdout + result.stderr
    [test] = _tests(out).values()
    assert test.status is Status.NOT_EXERCISED and test.kl_div is None  # nothing measured
    said = "max_total_tokens: expected at most 512, the server reported 65536 (GET /server_info)"
    assert said in test.message and said in result.stdout
    assert "not exercised" in (out / "report.md").read_text()
    path.write_text(HICACHE.format(pool="--max-total-tokens, '512'"))
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    [test] = _tests(out).values()
    assert test.status is Status.PASSED and [f.state for f in test.facts] == [FactState.HOLDS] * 3
    # The cost: one question per launch, shared with the run's own reading of the server.
    log = (out / "logs" / "hicache.log").read_text()
    assert log.count("GET /server_info") == 1


# The reference engine's configuration-only path and its resolved radix cache (item 5).

HYBRID_MTP = """
name: hybrid-mtp
server:
  engine: reference
  args: [--enable-deterministic-inference, --page-size, "4", --mamba-track-interval, "4",
         --cuda-graph-backend-prefill, breakable,
         --speculative-algorithm, {algorithm}, --speculative-num-draft-tokens, "4"]
  expect:
    # what the test guards: the prefill graph runner's track decision (sglang PR 35293)
    cuda_graph_config.prefill.backend: breakable
tests:
  - {{name: prefill, check: prefill_cache_hit, samples: 8, prompt_tokens: [72, 140],
      max_new_tokens: 8, vocab_size: 256}}
"""


def test_a_runner_eagle_never_builds_is_red_saying_so_and_green_under_dspark(cli, tmp_path):
    path = tmp_path / "hybrid.yaml"
    path.write_text(HYBRID_MTP.format(algorithm="EAGLE"))
    out = tmp_path / "out"
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 1, result.stdout + result.stderr
    [test] = _tests(out).values()
    said = (
        'cuda_graph_config.prefill.backend: expected "breakable", the server reported '
        '"disabled" (GET /server_info)'
    )
    assert test.status is Status.NOT_EXERCISED and said in test.message
    assert said in result.stdout and "not exercised" in (out / "report.md").read_text()
    log = (out / "logs" / "hybrid-mtp.log").read_text()
    assert "disable prefill graph for EAGLE target" in log  # the server says it too
    path.write_text(HYBRID_MTP.format(algorithm="DSPARK"))
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    [test] = _tests(out).values()
    assert test.status is Status.PASSED and test.facts[0].reported == '"breakable"'


MISSED_CACHE = """
name: missed-cache
server:
  engine: reference
  args: [--enable-deterministic-inference, --attention-backend, {backend}]
  expect: {{disable_radix_cache: false}}
tests:
  - {{name: match, check: match, samples: 4, prompt_tokens: [72, 140], max_new_tokens: 8,
      vocab_size: 256}}
  - {{name: prefill, check: prefill_cache_hit, samples: 4, prompt_tokens: [72, 140],
      max_new_tokens: 8, vocab_size: 256}}
"""


def test_a_radix_cache_the_backend_resolves_away_is_red_saying_so(cli, tmp_path):
    # sglang PR 36401: the cache flag stays on, the server resolves it off, and both sides
    # of the comparison run the same path; `match` alone would pass.
    path = tmp_path / "missed.yaml"
    path.write_text(MISSED_CACHE.format(backend="flashinfer"))
    out = tmp_path / "out"
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 1, result.stdout + result.stderr
    said = "disable_radix_cache: expected false, the server reported true (GET /server_info)"
    for test in _tests(out).values():
        assert test.status is Status.NOT_EXERCISED and said in test.message
    assert said in result.stdout
    comment = (out / "report.md").read_text().replace("&#95;", "_")
    assert "| **not exercised** |" in comment and said in comment
    path.write_text(MISSED_CACHE.format(backend="fa3"))
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert {t.status for t in _tests(out).values()} == {Status.PASSED}


# Knobs that stay load bearing (item 4): a changed knob or fact is said beside the test,
# with what the base had, and the proof job runs the changed test.


def _suite_result(args: tuple[str, ...], *stated: Fact) -> Results:
    test = TestResult("s::t", "match", Status.PASSED, kl_div=0.0, kl_threshold=1e-9, facts=stated)
    server = ServerInfo("reference", ("/usr/bin/python3", "-m", "kl_bitexact", *args))
    return Results(run=RunInfo(), suites=(SuiteResult("s", server, (test,)),))


def test_a_dropped_knob_and_fact_are_said_beside_the_test_with_what_the_base_had():
    from kl_bitexact.compare.comparison import compare
    from kl_bitexact.report.render import comment as render

    pool = Fact("max_total_tokens", "at most 512", FactState.HOLDS, "512", "GET /server_info")
    tier = Fact("enable_hierarchical_cache", "true", FactState.HOLDS, "true", "GET /server_info")
    base = _suite_result(("--enable-hierarchical-cache", "--max-total-tokens", "512"), pool, tier)
    head = _suite_result(("--enable-hierarchical-cache", "--page-size", "16"), tier)
    [delta] = compare(head, base).deltas
    assert delta.knobs == (
        "server argument dropped: --max-total-tokens 512 (the base had it)",
        "server argument added: --page-size 16 (not on the base)",
        "fact max_total_tokens no longer stated (the base expected at most 512)",
    )
    comment = render(compare(head, base))
    assert "| **ok · knobs changed** |" not in comment  # it does not gate by itself
    assert "| ok · knobs changed |" in comment
    assert "server argument dropped: --max-total-tokens 512 (the base had it)" in comment
    # Unchanged: nothing said. Attached to a URL: no arguments of ours to compare.
    assert compare(base, base).deltas[0].knobs == ()
    url = ServerInfo("reference", ("--base-url", "http://h:1"))
    attached = Results(run=RunInfo(), suites=(structs.replace(head.suites[0], server=url),))
    assert not any("argument" in k for k in compare(attached, base).deltas[0].knobs)


def test_prove_plan_counts_a_changed_fact_or_argument_as_a_changed_test(tmp_path, monkeypatch):
    from kl_bitexact.suite import changes

    text = (
        "name: s\nserver: {{engine: reference, args: [{args}], expect: {{{facts}}}}}\n"
        "tests: [{{name: t, check: match}}, {{name: u, check: match}}]\n"
    )
    base = tmp_path / "base"
    base.mkdir()
    (base / "s.yaml").write_text(text.format(args="--max-total-tokens, '512'", facts="a: 1"))
    head = tmp_path / "head"
    head.mkdir()
    monkeypatch.chdir(head)
    for args, facts_text in [("--page-size, '16'", "a: 1"), ("--max-total-tokens, '512'", "")]:
        (head / "s.yaml").write_text(text.format(args=args, facts=facts_text))
        suites = suite_file.load(Path("s.yaml"))
        found = changes.changed_tests(suites, [Path("s.yaml")], base)
        assert [(c.test_id, c.kind) for c in found] == [("s::t", "changed"), ("s::u", "changed")]


def test_vllm_facts_come_from_its_dev_mode_server_info_and_cannot_be_told_without_it():
    from fake_vllm import FakeVllmState, running_fake_vllm

    from kl_bitexact.run.engines.openai import connect

    stated = [
        _expect("cache_config.enable_prefix_caching", True),
        _expect("speculative_config", None),
    ]
    with running_fake_vllm() as (url, _):
        found = facts.check(stated, connect(url).reported())
    assert [f.state for f in found] == [FactState.HOLDS, FactState.HOLDS]
    assert found[0].source == "GET /server_info?config_format=json"
    with running_fake_vllm(FakeVllmState(dev_mode=False)) as (url, _):
        found = facts.check(stated, connect(url).reported())
    assert {f.state for f in found} == {FactState.UNKNOWN}
    assert "VLLM_SERVER_DEV_MODE=1" in found[0].failure()

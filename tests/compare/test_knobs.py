"""The knobs beside each test are `knobs.changes`, whatever shortcut compare takes to find
them (issue 40: most tests are passed by without a call; a test with facts, or on a server
whose arguments changed, must still be asked)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kl_bitexact.compare import knobs
from kl_bitexact.compare.comparison import compare
from kl_bitexact.results import model as r

ARGS = st.lists(st.sampled_from(["--page-size 16", "--page-size 64", "--chunked 512"]), max_size=2)
FACTS = st.lists(st.sampled_from(["page_size", "radix", "spec"]), max_size=2, unique=True)


def _server(flags: list[str]) -> r.ServerInfo:
    return r.ServerInfo("sglang", ("python", *(part for flag in flags for part in flag.split())))


def _test(test_id: str, facts: list[str], expected: str) -> r.TestResult:
    stated = tuple(r.Fact(name, expected, r.FactState.HOLDS) for name in facts)
    return r.TestResult(test_id, "match", r.Status.PASSED, facts=stated)


def _run(flags: list[str], facts: list[list[str]], expected: str) -> r.Results:
    tests = tuple(_test(f"s::t{n}", stated, expected) for n, stated in enumerate(facts))
    return r.Results(suites=(r.SuiteResult("s", _server(flags), tests),))


@settings(max_examples=60, deadline=None)
@given(
    head_args=ARGS,
    base_args=ARGS,
    head_facts=st.lists(FACTS, min_size=3, max_size=3),
    base_facts=st.lists(FACTS, min_size=3, max_size=3),
    expected=st.sampled_from(["true", "16"]),
)
def test_each_test_s_knobs_are_the_rule_s(head_args, base_args, head_facts, base_facts, expected):
    head = _run(head_args, head_facts, expected)
    base = _run(base_args, base_facts, "true")
    found = {delta.id: delta.knobs for delta in compare(head, base).deltas}
    for (_, now), (_, before) in zip(head.all_tests(), base.all_tests(), strict=True):
        servers = (head.suites[0].server, base.suites[0].server)
        assert found[now.id] == knobs.changes(now, before, *servers)

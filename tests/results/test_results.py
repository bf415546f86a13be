"""The results model: round trip, schema, untrusted input, shard merging."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from msgspec import structs

from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r


def make_test(test_id: str = "suite-a::decode_cache_hit", **changes) -> r.TestResult:
    base = r.TestResult(
        id=test_id,
        check="decode_cache_hit",
        status=r.Status.FAILED,
        kl_div=9.53e-05,
        kl_threshold=1e-9,
        kl_per_sample=(0.0, 1.906e-4),
        exact=r.ExactMatch(tokens=512, mismatched=130),
        cache_hits=r.CacheHits(hit=16, total=32, min_ratio=0.99, expected=16),
        first_divergence=(
            r.Divergence(
                sample=1,
                token_index=128,
                cached_tokens=1152,
                decode_logprob=-2.5,
                replay_logprob=-2.4999998,
                hint="first token after the restored checkpoint",
            ),
        ),
        blocked_by=("sgl-project/sglang#29792",),
        duration_s=12.5,
        message="avg KL 9.53e-05 >= 1e-09",
        warnings=("track interval 256 is not a multiple of page size 128",),
    )
    return structs.replace(base, **changes)


def make_results(
    *tests: r.TestResult, suite: str = "suite-a", shard: str | None = "0"
) -> r.Results:
    return r.Results(
        run=r.RunInfo(
            commit="abc123", ref="refs/pull/1/merge", shard=shard, started_at="2026-11-29T09:00:00Z"
        ),
        suites=(
            r.SuiteResult(
                name=suite,
                server=r.ServerInfo("reference", ("--page-size", "128"), 1.5),
                tests=tests or (make_test(),),
            ),
        ),
    )


def test_round_trip_preserves_every_field(tmp_path: Path):
    original = make_results(
        make_test(),
        make_test(
            "suite-a::match",
            check="match",
            status=r.Status.NOT_RUN,
            exact=None,
            cache_hits=None,
            kl_div=None,
        ),
        make_test(
            "suite-a::flaky",
            status=r.Status.FLAKY,
            repeats=r.Repeats(
                count=3,
                launches=2,
                positions=24,
                changed=5,
                kl=(0.0, 1e-18, None),
                cache_hits=(8, 7, None),
                statuses=(r.Status.PASSED, r.Status.FAILED, r.Status.PASSED),
                first_change="repeat 2 vs 1: sample 0, token 1: decoded token 3 vs 4",
            ),
        ),
    )
    path = tmp_path / "results.json"
    results_io.write_atomic(original, path)
    assert results_io.load(path) == original


def test_reach_and_the_prs_changes_round_trip(tmp_path: Path):
    ran = r.FunctionReach("m:f", True, r.RanWhen.TEST)
    missing = r.FunctionReach("m:g", False, note="m has no g")
    reach = r.Reach(
        True, (ran, missing), changed=(r.FunctionReach("p.q:C.h", True, r.RanWhen.STARTUP),)
    )
    changed = r.ChangedFunction(
        "p.q:C.h", "p/q.py", 3, (4, 5), ("s::t",), True, lines_run=(4,), lines_not_run=(5,)
    )
    base = make_results()
    [suite] = base.suites
    tests = tuple(structs.replace(t, reach=reach) for t in suite.tests)
    original = structs.replace(
        base,
        suites=(structs.replace(suite, tests=tests),),
        changes=r.Changes("a" * 40, "b" * 40, (changed,), lines_why_not=""),
    )
    path = tmp_path / "results.json"
    results_io.write_atomic(original, path)
    jsonschema.validate(json.loads(path.read_text()), results_io.schema())
    assert results_io.load(path) == original


def test_a_file_written_before_repeats_existed_still_loads(tmp_path: Path):
    """The flake meter's fields are additive (schema_version stays 1)."""
    document = json.loads(results_io.dumps(make_results()))
    for test in document["suites"][0]["tests"]:
        del test["repeats"]
    [(_, test)] = results_io.from_json(document).all_tests()
    assert test.repeats is None and test.status is r.Status.FAILED


def test_written_document_validates_against_published_schema(tmp_path: Path):
    document = json.loads(results_io.dumps(make_results()))
    jsonschema.Draft202012Validator.check_schema(results_io.schema())
    jsonschema.validate(document, results_io.schema())
    assert document["schema_version"] == 1
    assert set(document) == {"schema_version", "tool", "run", "suites", "plan", "changes"}
    test = document["suites"][0]["tests"][0]
    for key in (
        "id",
        "check",
        "status",
        "kl_div",
        "kl_threshold",
        "kl_per_sample",
        "exact",
        "cache_hits",
        "first_divergence",
        "blocked_by",
        "duration_s",
        "message",
    ):
        assert key in test


def test_schema_file_in_repo_is_the_packaged_one():
    path = Path(__file__).parents[2] / "src/kl_bitexact/schemas/results.schema.json"
    assert json.loads(path.read_text()) == results_io.schema()


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "results.json"
    path.write_text(content)
    return path


def good_document() -> dict:
    return json.loads(results_io.dumps(make_results()))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["suites"][0]["tests"][0].update(kl_div="0.1"), "suites/0/tests/0/kl_div"),
        (lambda d: d["suites"][0]["tests"][0].update(status="green"), "suites/0/tests/0/status"),
        (lambda d: d["suites"][0]["tests"][0]["cache_hits"].update(hit=-1), "cache_hits/hit"),
        (lambda d: d["suites"][0].pop("tests"), "suites/0"),
        (lambda d: d["suites"][0]["tests"][0].update(surprise=1), "suites/0/tests/0"),
    ],
)
def test_wrong_types_are_rejected_with_path(tmp_path, mutate, expected):
    document = good_document()
    mutate(document)
    path = write(tmp_path, json.dumps(document))
    with pytest.raises(ConfigError) as info:
        results_io.load(path)
    assert str(path) in info.value.message
    assert expected in info.value.message


def test_unknown_schema_version_is_named(tmp_path):
    document = good_document()
    document["schema_version"] = 2
    with pytest.raises(ConfigError, match="schema_version 2 is not supported"):
        results_io.load(write(tmp_path, json.dumps(document)))


def test_truncated_file_is_reported_as_truncated(tmp_path):
    text = results_io.dumps(make_results())
    with pytest.raises(ConfigError, match="truncated"):
        results_io.load(write(tmp_path, text[: len(text) // 2]))


def test_not_json_at_all(tmp_path):
    with pytest.raises(ConfigError, match="invalid JSON at line 1"):
        results_io.load(write(tmp_path, "<html>rate limited</html>"))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read results file"):
        results_io.load(tmp_path / "nope.json")


def test_oversized_file_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, results_io.dumps(make_results()))
    with pytest.raises(ConfigError, match="over the 100-byte limit"):
        results_io.load(path, max_bytes=100)


def test_merge_joins_suites_across_shards():
    shard0 = make_results(make_test("suite-a::one"), shard="0")
    shard1 = make_results(make_test("suite-a::two"), shard="1")
    other = make_results(make_test("suite-b::x"), suite="suite-b", shard="2")
    merged = results_io.merge([("s0.json", shard0), ("s1.json", shard1), ("s2.json", other)])
    assert [s.name for s in merged.suites] == ["suite-a", "suite-b"]
    assert [t.id for t in merged.suites[0].tests] == ["suite-a::one", "suite-a::two"]
    assert merged.run.shard is None


def test_merge_refuses_the_same_test_twice_naming_both_sources():
    shard0 = make_results(make_test("suite-a::one"))
    with pytest.raises(ConfigError, match=r"'suite-a::one' appears in both s0.json and s1.json"):
        results_io.merge([("s0.json", shard0), ("s1.json", shard0)])


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "out" / "results.json"
    results_io.write_atomic(make_results(), path)
    results_io.write_atomic(make_results(), path)
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


# --- the plan and whether the run finished (issue 14, case 1) ---------------------------


def planned(*ids: str) -> tuple[r.PlannedTest, ...]:
    return tuple(r.PlannedTest("suite-a", i, "match") for i in ids)


def test_plan_and_finished_round_trip_and_say_what_is_missing(tmp_path: Path):
    half = structs.replace(
        make_results(make_test("suite-a::one")),
        run=r.RunInfo(finished=False),
        plan=planned("suite-a::one", "suite-a::two"),
    )
    path = tmp_path / "results.json"
    results_io.write_atomic(half, path)
    loaded = results_io.load(path)
    assert loaded == half
    assert [item.id for item in loaded.missing()] == ["suite-a::two"]


def test_a_file_from_before_plans_loads_as_plan_and_finish_unknown(tmp_path: Path):
    document = json.loads(results_io.dumps(make_results()))
    del document["plan"], document["run"]["finished"]
    loaded = results_io.load(write(tmp_path, json.dumps(document)))
    assert loaded.plan is None and loaded.run.finished is None and loaded.missing() == ()


def test_merge_joins_plans_and_any_unfinished_shard_makes_the_run_unfinished():
    one = structs.replace(
        make_results(make_test("suite-a::one")),
        run=r.RunInfo(finished=True),
        plan=planned("suite-a::one"),
    )
    two = structs.replace(
        make_results(make_test("suite-a::two")),
        run=r.RunInfo(finished=False),
        plan=planned("suite-a::two", "suite-a::three"),
    )
    merged = results_io.merge([("a", one), ("b", two)])
    assert merged.plan is not None
    assert [item.id for item in merged.plan] == ["suite-a::one", "suite-a::two", "suite-a::three"]
    assert merged.run.finished is False
    unplanned = structs.replace(two, plan=None, run=r.RunInfo(finished=True))
    merged = results_io.merge([("a", one), ("b", unplanned)])
    # Issue 36: the plan-less part keeps what it ran, marked unplanned; the plan survives.
    assert merged.plan == (
        *planned("suite-a::one"),
        r.PlannedTest("suite-a", "suite-a::two", "decode_cache_hit", unplanned=True),
    )
    assert not merged.plan_complete and merged.planned_ids() == {"suite-a::one"}
    assert merged.run.finished is True
    # Parts that all recorded none join into none (a file from before plans, alone).
    plain_one = structs.replace(one, plan=None)
    assert results_io.merge([("a", plain_one), ("b", unplanned)]).plan is None


def test_a_test_that_could_not_be_measured_exits_2_even_beside_red_ones():
    from kl_bitexact.compare.comparison import compare
    from kl_bitexact.errors import ExitCode

    def exit_code(results: r.Results) -> ExitCode:
        # run's, pytest's and import-junit's code: the gate's, without a base (issue 27).
        return compare(results, None).decision.exit_code

    def run_of(*statuses: r.Status) -> r.Results:
        green = {  # numbers that back a pass (the gate checks them: issue 30)
            "kl_div": 0.0,
            "kl_per_sample": (0.0, 0.0),
            "exact": r.ExactMatch(tokens=512, mismatched=0),
            "cache_hits": r.CacheHits(hit=32, total=32, min_ratio=0.99),
        }
        tests = tuple(
            make_test(
                f"s::t{i}", status=s, blocked_by=(), **(green if s is r.Status.PASSED else {})
            )
            for i, s in enumerate(statuses)
        )
        return r.Results(suites=(r.SuiteResult("s", r.ServerInfo("openai"), tests),))

    # An adapter error beside failed tests is not a clean red run (issue 31).
    assert exit_code(run_of(r.Status.FAILED, r.Status.ERROR)) is ExitCode.COULD_NOT_RUN
    assert exit_code(run_of(r.Status.PASSED, r.Status.ERROR)) is ExitCode.COULD_NOT_RUN
    assert exit_code(run_of(r.Status.FAILED, r.Status.PASSED)) is ExitCode.GATE_FAILED
    assert exit_code(run_of(r.Status.PASSED)) is ExitCode.GATE_PASSED

"""`kl-bitexact report` as a user runs it: a real subprocess, real files, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_scenarios import BLOCKER, check_result, red_hicache, results

from kl_bitexact.registry.findings import Severity
from kl_bitexact.registry.findings_file import Finding, parse
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

NO_GITHUB = {
    "GITHUB_SERVER_URL": "",
    "GITHUB_REPOSITORY": "",
    "GITHUB_RUN_ID": "",
    "GITHUB_WORKFLOW": "",
}


def write_results(path: Path, *tests: r.TestResult, suite: str = "hicache-mamba") -> Path:
    results_io.write_atomic(results(*tests, suite=suite), path)
    return path


@pytest.fixture
def red_blocked(tmp_path: Path) -> Path:
    return write_results(
        tmp_path / "head.json", red_hicache("multiturn", blocked_by=(BLOCKER,)), check_result("b")
    )


def test_markdown_on_stdout_and_the_gate_as_exit_code(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", red_hicache("a"), check_result("b"))
    done = cli(["report", str(head)], env=NO_GITHUB)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith(
        "<!-- kl-bitexact:kl-bitexact -->\n## ❌ kl-bitexact: gate failed"
    )
    assert "baseline unavailable: no baseline given" in done.stdout


def test_fail_on_never_reports_without_failing(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", red_hicache("a"))
    assert cli(["report", str(head), "--fail-on", "never"], env=NO_GITHUB).returncode == 0


def test_json_verdict_and_markdown_to_file(cli, tmp_path: Path, red_blocked: Path):
    blockers = tmp_path / "blockers.json"
    blockers.write_text(json.dumps({BLOCKER: "open"}))
    out = tmp_path / "comment.md"
    done = cli(
        ["report", str(red_blocked), "--blockers", str(blockers), "--json", "--out", str(out)],
        env=NO_GITHUB,
    )
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "passed"
    assert verdict["counts"] == {"expected_red": 1, "ok": 1}
    assert "expected red until [sgl-project/sglang#\u206029792](" in out.read_text()
    # It says what it wrote (issue 37: `report --out` printed nothing).
    size = len(out.read_text())
    assert done.stderr.splitlines()[-1] == (
        f"kl-bitexact: wrote the PR comment to {out} ({size:,} characters)"
    )


def test_without_blocker_states_a_blocked_test_fails_closed(cli, red_blocked: Path):
    done = cli(["report", str(red_blocked), "--json"], env=NO_GITHUB)
    assert done.returncode == 1
    assert json.loads(done.stdout)["reasons"] == ["1 blocker unknown"]
    assert done.stderr.splitlines()[-1].startswith(
        "kl-bitexact: exit 1, gate failed: 1 blocker unknown ("
    )
    allowed = cli(["report", str(red_blocked), "--allow-unknown-blockers"], env=NO_GITHUB)
    assert allowed.returncode == 0


def test_strict_fails_an_unexpected_green(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", check_result("a", blocked_by=(BLOCKER,)))
    blockers = tmp_path / "blockers.json"
    blockers.write_text(json.dumps({BLOCKER: "open"}))
    args = ["report", str(head), "--blockers", str(blockers)]
    assert cli(args, env=NO_GITHUB).returncode == 0
    assert cli([*args, "--strict"], env=NO_GITHUB).returncode == 1


def test_baseline_deltas_and_an_unsupported_baseline(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", red_hicache("a"))
    base = write_results(tmp_path / "base.json", check_result("a"))
    done = cli(["report", str(head), "--baseline", str(base)], env=NO_GITHUB)
    assert "| +9.53e-05 |" in done.stdout and "1 newly red" in done.stdout
    document = json.loads(base.read_text())
    base.write_text(json.dumps({**document, "schema_version": 2}))
    done = cli(["report", str(head), "--baseline", str(base)], env=NO_GITHUB)
    assert done.returncode == 1
    assert "baseline unavailable:" in done.stdout and "schema&#95;version 2" in done.stdout


def test_a_baseline_file_that_does_not_exist_is_an_error_naming_it(cli, tmp_path: Path):
    # It printed nothing and exited 0: no deltas, and no word why outside the comment.
    head = write_results(tmp_path / "head.json", check_result("a"))
    done = cli(["report", str(head), "--baseline", "nothere.json"], cwd=tmp_path, env=NO_GITHUB)
    assert done.returncode == 2 and done.stdout == ""
    assert "kl-bitexact: error: --baseline nothere.json: no such file" in done.stderr


def test_an_unusable_baseline_is_a_notice_on_stderr_not_fatal(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", check_result("a"))
    base = tmp_path / "base.json"
    base.write_text('{"schema_version": 2}')
    done = cli(["report", str(head), "--baseline", str(base)], env=NO_GITHUB)
    assert done.returncode == 0, done.stderr
    assert "baseline unavailable:" in done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("kl-bitexact: no deltas: baseline unavailable: ") and str(base) in line


def test_shards_are_merged(cli, tmp_path: Path):
    one = write_results(tmp_path / "1.json", check_result("a"), suite="s1")
    two = write_results(tmp_path / "2.json", check_result("b"), suite="s2")
    done = cli(["report", str(one), str(two), "--json"], env=NO_GITHUB)
    assert [t["id"] for t in json.loads(done.stdout)["tests"]] == ["a", "b"]


def test_expected_shards_a_missing_shard_is_an_error_that_gates(cli, tmp_path: Path):
    # The action's `expected-shards`, for workflows that call the CLI themselves.
    one = write_results(tmp_path / "results-s-0" / "results.json", check_result("a"))
    matrix = json.dumps({"include": [{"name": "s-0"}, {"name": "s-1"}]})
    done = cli(["report", str(one), "--expected-shards", matrix, "--json"], env=NO_GITHUB)
    # Gated, as could not run (exit 2): a job that uploaded nothing is not the change's fault.
    assert done.returncode == 2, done.stderr
    tests = {t["id"]: t for t in json.loads(done.stdout)["tests"]}
    assert tests["shard-s-1"]["verdict"] == "could_not_run" and tests["a"]["verdict"] == "ok"
    assert "shard s-1: no results-s-1/results.json among the results given" in done.stderr
    every = cli(["report", str(one), "--expected-shards", '["s-0"]'], env=NO_GITHUB)
    assert every.returncode == 0, every.stderr


def test_expected_shards_with_no_results_at_all_reports_every_shard(cli, tmp_path: Path):
    done = cli(["report", "--expected-shards", '["s-0", "s-1"]'], env=NO_GITHUB)
    assert done.returncode == 2, done.stderr  # no test executed at all: could not run
    assert "could not run" in done.stdout
    assert "shard s-0 uploaded no results" in done.stdout
    assert "shard s-1 uploaded no results" in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no results given"),
        (["--expected-shards", "[1"], "argument --expected-shards: not JSON"),
        (["--expected-shards", "[" * 100_000], "argument --expected-shards: nested more than 64"),
        (["--expected-shards", '["../x"]'], "'../x' is not a shard name"),
    ],
)
def test_expected_shards_usage_errors_name_what_to_pass(cli, argv, message):
    done = cli(["report", *argv], env=NO_GITHUB)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_nothing_executed_could_not_run(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", check_result("a", r.Status.NOT_RUN))
    done = cli(["report", str(head)], env=NO_GITHUB)
    assert done.returncode == 2
    assert "could not run: no test executed" in done.stdout
    verdict = json.loads(cli(["report", str(head), "--json"], env=NO_GITHUB).stdout)
    assert (verdict["verdict"], verdict["exit_code"]) == ("could_not_run", 2)


def test_job_summary_is_appended_and_annotations_printed(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", red_hicache("a", message="bad\nvery bad"))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env = {
        **NO_GITHUB,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "9",
    }
    done = cli(
        ["report", str(head), "--annotations", "--job-summary", str(summary), "--out", "/dev/null"],
        env=env,
    )
    assert (
        done.stdout
        == "::error title=kl-bitexact failing (no base result)%3A hicache-mamba a::bad%0Avery bad\n"
    )
    text = summary.read_text()
    assert text.startswith("earlier step\n## ❌ kl-bitexact: gate failed")
    assert "(https://github.com/o/r/actions/runs/9)" in text


def test_key_defaults_to_the_workflow_name(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", check_result("a"))
    done = cli(["report", str(head)], env={**NO_GITHUB, "GITHUB_WORKFLOW": "Bit-exact B200"})
    assert done.stdout.startswith("<!-- kl-bitexact:Bit-exact B200 -->")


def test_findings_file(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", check_result("a"))
    findings = tmp_path / "findings.json"
    finding = {
        "file": "test/registered/t.py",
        "line": 4,
        "code": "unlisted-suite",
        "severity": "error",
        "message": "suite 'x' is not in the allowlist",
        "fix": "add it",
    }
    findings.write_text(json.dumps({"findings": [finding]}))
    done = cli(["report", str(head), "--findings", str(findings)], env=NO_GITHUB)
    assert "### Registration findings" in done.stdout
    assert "<code>test/registered/t.py:4</code>" in done.stdout


@pytest.mark.parametrize(
    ("option", "content", "message"),
    [
        ("--blockers", '{"o/r#1": "maybe"}', "state 'maybe' is not one of open, merged"),
        ("--blockers", '{"nonsense": "open"}', "is not a pull request or issue reference"),
        ("--blockers", "[", "not JSON"),
        ("--findings", '{"findings": [{"file": "a"}]}', "findings[0].severity must be a string"),
        ("--findings", '{"other": []}', 'expected an object with a "findings" list'),
    ],
)
def test_bad_side_files_are_one_line_errors(cli, tmp_path: Path, option, content, message):
    head = write_results(tmp_path / "head.json", check_result("a"))
    side = tmp_path / "side.json"
    side.write_text(content)
    done = cli(["report", str(head), option, str(side)], env=NO_GITHUB)
    assert done.returncode == 2
    assert message in done.stderr and str(side) in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_results_file_is_exit_2(cli, tmp_path: Path):
    bad = tmp_path / "head.json"
    bad.write_text('{"schema_version": 1, "suites": [')
    done = cli(["report", str(bad)], env=NO_GITHUB)
    assert done.returncode == 2 and "truncated" in done.stderr


def test_findings_parse_keeps_every_field():
    document = {
        "findings": [
            {"file": "a.py", "line": None, "code": "c", "severity": "warning", "message": "m"}
        ]
    }
    assert parse(document) == (Finding("a.py", None, "c", Severity.WARNING, "m", ""),)


def test_lone_surrogates_from_json_do_not_crash_the_writers(cli, tmp_path: Path):
    head = write_results(tmp_path / "head.json", red_hicache("a"))
    document = head.read_text().replace('"id":"a"', '"id":"a\\ud800"')
    head.write_text(document)
    summary = tmp_path / "summary.md"
    done = cli(["report", str(head), "--annotations", "--job-summary", str(summary)], env=NO_GITHUB)
    assert done.returncode == 1, done.stderr
    assert "hicache-mamba a\ufffd::" in done.stdout and "<code>a</code>" in summary.read_text()


def test_proof_file_shows_each_new_test_and_strict_gates_on_unproven(cli, tmp_path: Path):
    """`report head.json --proof proof.json` (issue 19): the proof run's tests judged."""
    fixed = check_result("dspark")
    weak = check_result("match")
    head = write_results(tmp_path / "head.json", fixed, weak)
    reverted = red_hicache("dspark", kl_div=1.10e-01, message="avg KL 1.10e-01 >= 1e-09")
    proof = write_results(tmp_path / "proof.json", reverted, weak)
    done = cli(["report", str(head), "--proof", str(proof), "--json"], env=NO_GITHUB)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert [(p["id"], p["outcome"]) for p in verdict["proof"]] == [
        ("dspark", "proven"),
        ("match", "unproven"),
    ]
    comment = cli(["report", str(head), "--proof", str(proof)], env=NO_GITHUB).stdout
    assert "**proven** - red on base, green on head: KL 1.10e-01 -> 0" in comment
    strict = cli(["report", str(head), "--proof", str(proof), "--proof-strict"], env=NO_GITHUB)
    assert strict.returncode == 1
    assert "gate failed: 1 new test not shown to detect anything (proof strict)" in strict.stdout
    missing = cli(["report", str(head), "--proof", str(tmp_path / "nope.json")], env=NO_GITHUB)
    assert missing.returncode == 2 and "nope.json" in missing.stderr


def test_expected_proofs_a_proof_job_that_reported_nothing_could_not_prove(cli, tmp_path: Path):
    """A planned proof job with no results (it failed or never started): its tests are said
    to be unproven for that reason, not left out as if nothing needed proving."""
    head = write_results(tmp_path / "head.json", check_result("dspark"), check_result("match"))
    reverted = red_hicache("dspark", kl_div=1.10e-01, message="avg KL 1.10e-01 >= 1e-09")
    arrived = write_results(tmp_path / "proof" / "proof-a" / "results.json", reverted)
    matrix = json.dumps(
        {
            "include": [
                {"suite": "a", "name": "proof-a", "files": ["a.yaml"], "tests": ["dspark"]},
                {"suite": "b", "name": "proof-b", "files": ["b.yaml"], "tests": ["match"]},
            ]
        }
    )
    argv = ["report", str(head), "--proof", str(arrived), "--expected-proofs", matrix]
    done = cli([*argv, "--json"], env=NO_GITHUB)
    assert done.returncode == 0, done.stderr  # could not prove never gates
    outcomes = [(p["id"], p["outcome"]) for p in json.loads(done.stdout)["proof"]]
    assert outcomes == [("dspark", "proven"), ("match", "could_not_prove")]
    assert "proof job proof-b: no proof-b/results.json among the --proof files" in done.stderr
    comment = cli(argv, env=NO_GITHUB).stdout
    assert "**could not prove** - the base run errored: proof job proof-b uploaded no results" in (
        comment
    )
    # Every planned job missing (say the proof jobs never started): no --proof file needed.
    alone = cli(["report", str(head), "--expected-proofs", matrix, "--json"], env=NO_GITHUB)
    assert [p["outcome"] for p in json.loads(alone.stdout)["proof"]] == ["could_not_prove"] * 2


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ("[1", "not JSON"),
        ("[" * 100_000, "nested more than 64 levels deep"),  # argv: at most 128 KiB
        ('["proof-a"]', "expected a prove-plan matrix"),
        ('{"include": [{"name": "../x", "suite": "s", "tests": ["t"]}]}', "not a proof job name"),
        ('{"include": [{"name": "proof-s", "suite": "s", "tests": [7]}]}', "not a short string"),
    ],
)
def test_expected_proofs_usage_errors_name_what_to_pass(cli, tmp_path: Path, matrix, message):
    head = write_results(tmp_path / "head.json", check_result("a"))
    done = cli(["report", str(head), "--expected-proofs", matrix], env=NO_GITHUB)
    assert done.returncode == 2
    assert "--expected-proofs" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("fails", [False, True])
def test_report_runs_without_the_cycle_collector_and_restores_it(monkeypatch, tmp_path, fails):
    """Results and report rows are acyclic: the collector would only walk them again and
    again (a quarter of report's CPU on 20,000 tests). Paused for the command, restored
    after it, however it ends (in-process callers keep their collector)."""
    import gc

    from kl_bitexact import cli as kl_cli
    from kl_bitexact.report import render

    seen: list[bool] = []
    comment = render.comment

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        if fails:
            raise RuntimeError("render broke")
        return comment(*args, **kwargs)

    monkeypatch.setattr(render, "comment", spy)
    monkeypatch.setenv("KL_BITEXACT_LOG_DIR", str(tmp_path))
    head = write_results(tmp_path / "head.json", check_result("a"))
    assert gc.isenabled()
    code = kl_cli.main(["report", str(head), "--out", str(tmp_path / "comment.md")])
    assert (code, seen, gc.isenabled()) == (3 if fails else 0, [False], True)

"""The action's step (`kl-bitexact action`): inputs, command lines, outputs, shards, trust."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import proof_repo
import pytest
from msgspec import structs

from kl_bitexact import cli as kl_cli
from kl_bitexact.action import inputs as action_inputs
from kl_bitexact.action import outputs, shards, trust
from kl_bitexact.action.inputs import ActionInputs, Prove
from kl_bitexact.commands import pytest_cmd, run
from kl_bitexact.commands.action import (
    STEPS,
    comment_url,
    expand_suites,
    label_shards,
    publish_options,
    pytest_options,
    readable_durations,
    report_options,
    run_options,
    shard_options,
)
from kl_bitexact.compare.gate import FailOn, FailOnChoice, Policy, parse_fail_on
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results


def env(**values: str) -> dict[str, str]:
    return {"INPUT_" + key.upper(): value for key, value in values.items()}


def read_inputs(environ: dict[str, str]) -> ActionInputs:
    return action_inputs.read_inputs(environ, STEPS)


def test_the_action_s_commands_are_the_cli_s_but_trust():
    """One list: the action's steps are named as the commands they run."""
    names = {command.name for command in kl_cli.COMMANDS}
    assert [step for step in STEPS if step not in names] == ["trust"]


# --- inputs -------------------------------------------------------------------------------


def test_defaults_when_inputs_are_empty():
    inputs = read_inputs(env(command="", comment="", strict=""))
    assert inputs == ActionInputs(command="run")


def test_inputs_are_parsed():
    inputs = read_inputs(
        env(
            command="publish",
            suites=" a.yaml  b/*.yaml ",
            fail_on="never",
            comment="False",
            strict="TRUE",
            partitions="3",
            repeat="5",
            findings="lint/findings.json",
            expected_shards='["s-0", "s-1"]',
            args="--select decode",
        )
    )
    assert inputs.suites == ("a.yaml", "b/*.yaml")
    assert (inputs.fail_on, inputs.comment, inputs.strict) == (
        FailOnChoice(FailOn.NEVER),
        False,
        True,
    )
    assert (inputs.partitions, inputs.findings) == (3, "lint/findings.json")
    ran = run_options(inputs, [])
    assert inputs.repeat == 5 and ran.repeat == 5
    # run's exit code is the gate's verdict under the same policy as publish's (issue 27).
    assert ran.fail_on == FailOnChoice(FailOn.NEVER)
    assert ran.select == ("decode",)  # the args input, parsed as run's words
    assert inputs.expected_shards == ("s-0", "s-1")
    assert inputs.args == ("--select", "decode")


def test_the_gate_input_becomes_run_s_gate_option():
    from kl_bitexact.suite.model import Gate

    inputs = read_inputs(env(gate="noise-floor"))
    assert inputs.gate is Gate.NOISE_FLOOR
    assert run_options(inputs, ["s.yaml"]).gate is Gate.NOISE_FLOOR
    assert run_options(read_inputs(env()), ["s.yaml"]).gate is None


@pytest.mark.parametrize(
    "value", ["flaky", "failure,flaky", "regression, flaky", "failure,allow-known"]
)
def test_fail_on_takes_flaky_beside_a_mode(value):
    inputs = read_inputs(env(fail_on=value))
    assert inputs.fail_on == parse_fail_on(value)
    reported = report_options(inputs, [], Path("c.md"), None, [])
    assert reported.shown.policy == Policy(
        inputs.fail_on.mode, flaky=inputs.fail_on.flaky, allow_known=inputs.fail_on.allow_known
    )


@pytest.mark.parametrize(("value", "runs"), [("", 20), ("0", 0), ("5", 5), ("100", 100)])
def test_history_runs_fetches_that_many_runs_beside_the_baseline_or_none(value, runs):
    inputs = read_inputs(env(command="publish", baseline="fetch", history_runs=value))
    assert inputs.history_runs == runs
    published = publish_options(inputs, [Path("r.json")], [])
    assert published.baseline.fetch
    assert published.base_history.fetch is bool(runs)
    assert published.base_history.runs == (runs or 20)  # 0: not fetched; publish's default
    # A baseline file, or report: nothing is fetched, history included.
    given = read_inputs(env(command="publish", baseline="b.json", history_runs=value))
    assert not publish_options(given, [Path("r.json")], []).base_history.fetch


@pytest.mark.parametrize("value", ["101", "-1", "x", "2.5"])
def test_history_runs_out_of_range_is_refused(value):
    with pytest.raises(ConfigError, match="action input `history-runs`"):
        read_inputs(env(history_runs=value))


def test_expected_shards_accepts_the_shard_matrix():
    matrix = {"include": [{"name": "suite-0", "files": ["a"]}, {"name": "suite-1", "files": []}]}
    inputs = read_inputs(env(expected_shards=json.dumps(matrix)))
    assert inputs.expected_shards == ("suite-0", "suite-1")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"command": "deploy"}, "action input `command`: 'deploy' is not one of run, publish"),
        ({"fail_on": "always"}, "action input `fail-on`: 'always' is not one of"),
        ({"fail_on": "never,failure"}, "'never,failure' is not one of regression, failure"),
        ({"repeat": "-1"}, "action input `repeat`: '-1' is not a positive integer"),
        ({"gate": "loose"}, "action input `gate`: 'loose' is not one of bit-exact, noise-floor"),
        ({"comment": "yes"}, "action input `comment`: 'yes' is not true or false"),
        ({"partitions": "two"}, "action input `partitions`: 'two' is not a positive integer"),
        (
            {"shard_timeout": "soon"},
            "action input `shard-timeout`: 'soon' is not a positive number",
        ),
        ({"expected_shards": "[1"}, "action input `expected-shards`: not JSON"),
        ({"expected_shards": '{"a": 1}'}, "expected a JSON list of shard names"),
        ({"expected_shards": '["../../home/x"]'}, "'../../home/x' is not a shard name"),
        ({"expected_shards": '[".."]'}, "'..' is not a shard name"),
    ],
)
def test_bad_inputs_name_the_input(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        read_inputs(env(**values))
    assert "with:" in (caught.value.hint or "")


# --- command lines ------------------------------------------------------------------------


def test_run_options_from_the_inputs():
    inputs = ActionInputs(command="run", base_url="http://h:1", args=("--exact",))
    assert run_options(inputs, ["a.yaml"]) == run.Options(
        suites=(Path("a.yaml"),),
        out=Path("kl-bitexact-results"),
        base_url="http://h:1",
        exact=True,
    )


def test_the_args_input_is_run_s_words_over_the_inputs():
    """Words appended to run's command line, as before: a value there wins, a repeatable
    option adds, a suite file runs after the suites input's; a word run does not take is
    the input's error."""
    inputs = ActionInputs(
        command="run", repeat=2, args=("--repeat", "3", "--select", "a", "extra.yaml")
    )
    given = run_options(inputs, ["s.yaml"])
    assert (given.repeat, given.select) == (3, ("a",))
    assert given.suites == (Path("s.yaml"), Path("extra.yaml"))
    with pytest.raises(ConfigError, match="action input `args`: run does not take --nope"):
        run_options(dataclasses.replace(inputs, args=("--nope",)), [])
    with pytest.raises(ConfigError, match="action input `args`: argument --repeat"):
        run_options(dataclasses.replace(inputs, args=("--repeat", "0")), [])


def test_publish_options_from_the_inputs():
    inputs = ActionInputs(command="publish", baseline="base.json", strict=True, findings="f.json")
    options = publish_options(inputs, [Path("r/results.json")], [Path("p.json")])
    assert options.shown.results == (Path("r/results.json"),) and options.shown.annotations
    assert (options.baseline.file, options.baseline.fetch) == (Path("base.json"), False)
    assert options.shown.findings == Path("f.json")
    assert options.shown.policy == Policy(FailOn.REGRESSION, strict=True)
    assert options.shown.proof == ()  # prove is off


def test_the_args_input_is_parsed_over_the_inputs_by_publish_s_parser():
    """As words appended to a command line: a value given there wins, a repeatable option
    adds to the inputs'; a word publish does not take is the input's error."""
    inputs = ActionInputs(
        command="publish",
        prove=Prove.ON,
        args=("--fail-on", "failure", "--proof", "extra.json", "--blocker-repo", "o/*"),
    )
    options = publish_options(inputs, [Path("r.json")], [Path("p.json")])
    assert options.shown.policy.fail_on is FailOn.FAILURE
    assert options.shown.proof == (Path("p.json"), Path("extra.json"))
    assert options.blocker_repos == ("o/*",)
    wrong = dataclasses.replace(inputs, args=("--no-such-option",))
    with pytest.raises(ConfigError, match="action input `args`: publish does not take --no-such"):
        publish_options(wrong, [Path("r.json")], [])


def test_expected_shards_reach_report_and_publish_as_the_option():
    inputs = ActionInputs(command="publish", expected_shards=("s-0", "s-1"))
    assert publish_options(inputs, [], []).shown.expected_shards == ("s-0", "s-1")
    assert report_options(inputs, [], Path("c.md"), None, []).shown.expected_shards == (
        "s-0",
        "s-1",
    )


def test_publish_fetches_the_baseline_and_report_cannot():
    inputs = ActionInputs(command="publish", baseline="fetch", fail_on=FailOnChoice(FailOn.NEVER))
    options = publish_options(inputs, [Path("r.json")], [])
    assert (options.baseline.fetch, options.base_history.fetch) == (True, True)
    assert options.shown.policy.fail_on is FailOn.NEVER
    reported = report_options(inputs, [Path("r.json")], Path("c.md"), "summary.md", [])
    assert (reported.shown.results, reported.out, reported.job_summary) == (
        (Path("r.json"),),
        Path("c.md"),
        Path("summary.md"),
    )
    assert (reported.baseline, reported.shown.policy.fail_on) == (None, FailOn.NEVER)


def test_lint_and_shard_command_lines():
    inputs = ActionInputs(command="shard", partitions=4)
    options = shard_options(inputs, "s", [])
    assert (options.suite, options.partitions, options.timeout) == ("s", 4, None)
    derived = ActionInputs(command="shard", shard_timeout=45.0, args=("--nightly",))
    options = shard_options(derived, "s", [])
    assert (options.partitions, options.timeout, options.nightly) == (None, 45.0, True)
    sglang = dataclasses.replace(derived, args=("--format", "sglang"))
    with pytest.raises(ConfigError, match="--format sglang: the shard step plans the GitHub"):
        shard_options(sglang, "s", [])


def test_shard_takes_the_readable_durations_files_and_warns_of_the_rest(tmp_path, capsys):
    """The history cache the plan job restores is nobody's word: a file that does not read
    as results is left out with a warning, and a glob matching nothing (the first run) is
    no error."""
    cache = tmp_path / "kl-bitexact-history" / "o_r" / "ci.yml" / "main" / "kl-bitexact-results"
    cache.mkdir(parents=True)
    good = [cache / "run-1.json", cache / "run-2.json"]
    for path in good:
        results_io.write_atomic(results.Results(), path)
    (cache / "run-3.json").write_text('{"schema_version": 1, "suites": "poison"}')
    pattern = f"{tmp_path}/kl-bitexact-history/**/run-*.json"
    inputs = read_inputs(env(command="shard", suites="s", durations=f"{pattern} {tmp_path}/none/*"))
    assert inputs.durations == (pattern, f"{tmp_path}/none/*")
    readable = readable_durations(inputs.durations)
    assert readable == good
    warning = capsys.readouterr().out
    assert (
        warning.startswith("::warning title=kl-bitexact::durations: ") and "run-3.json" in warning
    )
    assert shard_options(inputs, "s", readable).durations == tuple(good)
    assert readable_durations([f"{tmp_path}/nothing/**/run-*.json"]) == []


def test_zero_means_unset_for_number_inputs():
    inputs = read_inputs(env(partitions="0", shard_timeout="0"))
    assert (inputs.partitions, inputs.shard_timeout) == (None, None)
    assert read_inputs(env(shard_timeout="12.5")).shard_timeout == 12.5


def test_comment_url_from_publish_s_comment_id_and_the_event(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}, "number": 42}))
    environ = {
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_REPOSITORY": "o/r",
    }
    assert comment_url(1003, environ) == "https://github.example/o/r/pull/42#issuecomment-1003"
    assert comment_url(1003, {**environ, "GITHUB_EVENT_PATH": ""}) == ""  # no pull request


def test_suite_globs_are_expanded_and_a_dead_glob_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("b.yaml", "a.yaml", "c.txt"):
        (tmp_path / name).write_text("")
    assert expand_suites(["*.yaml", "plain.yaml"]) == ["a.yaml", "b.yaml", "plain.yaml"]
    with pytest.raises(ConfigError, match=r"'nothing/\*.yaml' matches no file"):
        expand_suites(["nothing/*.yaml"])


def test_shard_entries_are_labelled_with_suite_and_name():
    include = [{"partition": 0, "files": ["a"]}, {"partition": 1, "files": ["b"]}]
    assert label_shards("s", include) == [
        {"partition": 0, "files": ["a"], "suite": "s", "name": "s-0"},
        {"partition": 1, "files": ["b"], "suite": "s", "name": "s-1"},
    ]


# --- outputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [(0, "success"), (1, "failure"), (2, "error"), (3, "error"), (130, "cancelled")],
)
def test_conclusion_follows_the_exit_code(code, name):
    assert outputs.conclusion(code) == name


def test_outputs_survive_multiline_values(tmp_path):
    path = tmp_path / "out"
    outputs.append(str(path), outputs.format_outputs({"a": "one\ntwo", "b": "x"}))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("a<<ghadelimiter_") and lines[1:3] == ["one", "two"]
    assert lines[3] == lines[0].split("<<")[1]
    assert lines[4].startswith("b<<") and lines[5] == "x"


def test_summary_json_counts_tests_per_status(tmp_path):
    test = results.TestResult(id="t", check="match", status=results.Status.PASSED)
    suite = results.SuiteResult(name="s", server=results.ServerInfo(engine="reference"))
    document = results.Results(suites=(structs.replace(suite, tests=(test, test)),))
    path = tmp_path / "results.json"
    results_io.write_atomic(document, path)
    summary = json.loads(outputs.summary_json("run", 0, [path], ""))
    assert summary == {
        "command": "run",
        "exit_code": 0,
        "conclusion": "success",
        "tests": {"passed": 2},
        "results": [str(path)],
        "comment_url": "",
    }


# --- shards -------------------------------------------------------------------------------


def test_missing_shards_are_found_and_stand_ins_are_valid_results(tmp_path):
    (tmp_path / "results-s-0").mkdir()
    present = tmp_path / "results-s-0" / "results.json"
    results_io.write_atomic(shards.missing_shard_results("x"), present)
    found = shards.results_files(tmp_path)
    assert shards.missing_shards(found, ["s-0", "s-1"]) == ["s-1"]
    # Only the artifact layout names a shard: a file elsewhere stands for none.
    assert shards.missing_shards([tmp_path / "s-1.json"], ["s-1"]) == ["s-1"]
    stand_in = shards.missing_shard_results("s-1")
    reloaded = results_io.from_json(results_io.to_json(stand_in))
    [(_, test)] = list(reloaded.all_tests())
    assert test.status is results.Status.ERROR
    assert "shard s-1 uploaded no results" in test.message


# --- trust --------------------------------------------------------------------------------


def pr_event(head_repo: str, association: str, action: str = "opened", label: str = "") -> dict:
    event = {
        "action": action,
        "pull_request": {
            "head": {"repo": {"full_name": head_repo}},
            "author_association": association,
        },
    }
    if label:
        event["label"] = {"name": label}
    return event


@pytest.mark.parametrize(
    ("event_name", "event", "trusted"),
    [
        ("push", {}, True),
        ("pull_request", pr_event("o/r", "CONTRIBUTOR"), True),
        ("pull_request", pr_event("fork/r", "MEMBER"), True),
        ("pull_request_target", pr_event("fork/r", "COLLABORATOR", "synchronize"), True),
        ("pull_request", pr_event("fork/r", "CONTRIBUTOR"), False),
        ("pull_request", pr_event("fork/r", "FIRST_TIME_CONTRIBUTOR", "labeled", "run-ci"), True),
        ("pull_request", pr_event("fork/r", "NONE", "labeled", "bug"), False),
        ("pull_request", pr_event("fork/r", "NONE", "synchronize", "run-ci"), False),
        ("pull_request", {}, False),
        # Issue 14, case 4: review events on a fork PR were "not a pull request", trusted.
        ("pull_request_review", pr_event("fork/r", "NONE", "submitted"), False),
        ("pull_request_review_comment", pr_event("fork/r", "CONTRIBUTOR", "created"), False),
        ("pull_request_review", pr_event("fork/r", "NONE", "labeled", "run-ci"), False),
        ("pull_request_review", pr_event("o/r", "NONE", "submitted"), True),
        ("pull_request_review_comment", pr_event("fork/r", "MEMBER", "created"), True),
        # Unknown (or future) events are untrusted; the repository's own code is not.
        ("issue_comment", {"issue": {"pull_request": {}}}, False),
        ("discussion", {}, False),
        ("", {}, False),
        ("schedule", {}, True),
        ("workflow_dispatch", {}, True),
        ("workflow_run", {"workflow_run": {"head_repository": {"full_name": "o/r"}}}, True),
        ("workflow_run", {"workflow_run": {"head_repository": {"full_name": "fork/r"}}}, False),
        ("workflow_run", {}, False),
        ("pull_request", {"pull_request": {"head": "not a mapping"}}, False),
    ],
)
def test_trust_decision(event_name, event, trusted):
    verdict = trust.decide(event_name, event, "o/r", "run-ci")
    assert verdict.trusted is trusted, verdict.reason


def test_untrusted_reason_names_the_label():
    verdict = trust.decide("pull_request", pr_event("evil/r", "NONE"), "o/r", "safe-to-run")
    assert "evil/r" in verdict.reason and "`safe-to-run`" in verdict.reason


# --- the step, as action.yml runs it ------------------------------------------------------


def trust_step(cli, tmp_path, event_name: str, event: dict):
    path, out, summary = tmp_path / "event.json", tmp_path / "output", tmp_path / "summary"
    path.write_text(json.dumps(event))
    finished = cli(
        ["action"],
        env={
            **env(command="trust"),
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(path),
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_SHA": "c" * 40,  # under workflow_run: the default branch's head
            "GITHUB_OUTPUT": str(out),
            "GITHUB_STEP_SUMMARY": str(summary),
        },
    )
    return finished, out.read_text(), summary.read_text() if summary.exists() else ""


def test_trust_step_writes_outputs_and_summary(cli, tmp_path):
    event = pr_event("fork/r", "NONE", "labeled", "run-ci")
    event["pull_request"]["head"]["sha"] = "a" * 40
    finished, written, summary = trust_step(cli, tmp_path, "pull_request", event)
    assert finished.returncode == 0, finished.stderr
    assert "\ntrue\n" in written.split("trusted<<", 1)[1]
    assert f"\n{'a' * 40}\n" in written.split("head-sha<<", 1)[1]
    assert "applied the `run-ci` label" in summary


def test_trust_step_names_the_workflow_runs_head_not_the_default_branch(cli, tmp_path):
    # Issue 30, item 1: the checkouts took `pull_request.head.sha || github.sha`, the
    # default branch's head under workflow_run.
    event = {"workflow_run": {"head_sha": "b" * 40, "head_repository": {"full_name": "o/r"}}}
    finished, written, _ = trust_step(cli, tmp_path, "workflow_run", event)
    assert finished.returncode == 0, finished.stderr
    assert f"\n{'b' * 40}\n" in written.split("head-sha<<", 1)[1]


def test_trust_step_refuses_an_event_that_names_no_commit_by_name(cli, tmp_path):
    finished, written, _ = trust_step(cli, tmp_path, "issue_comment", {"issue": {"number": 7}})
    assert finished.returncode == 2
    assert "the issue_comment event is not one kl-bitexact can test" in finished.stderr
    assert "\nerror\n" in written.split("conclusion<<", 1)[1] and "head-sha" not in written


def test_bad_input_still_sets_conclusion_and_exits_2(cli, tmp_path):
    out = tmp_path / "output"
    finished = cli(["action"], env={**env(command="deploy"), "GITHUB_OUTPUT": str(out)})
    assert finished.returncode == 2
    assert "action input `command`" in finished.stderr and "Traceback" not in finished.stderr
    assert "conclusion<<" in out.read_text() and "\nerror\n" in out.read_text()


def test_publish_with_nothing_to_publish_is_exit_2(cli, tmp_path):
    finished = cli(["action"], env={**env(command="publish", results_dir=str(tmp_path))})
    assert finished.returncode == 2
    assert "no results.json under" in finished.stderr


def passed_results(directory: Path, suite: str) -> None:
    test = results.TestResult(id=f"{suite}::match", check="match", status=results.Status.PASSED)
    server = results.ServerInfo(engine="reference")
    document = results.Results(suites=(results.SuiteResult(suite, server, (test,)),))
    results_io.write_atomic(document, directory / "results.json")


def test_report_step_reports_a_missing_shard_and_fails_the_gate(cli, tmp_path):
    passed_results(tmp_path / "results" / "results-s-0", "s")
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    finished = cli(
        ["action"],
        env={
            **env(command="report", results_dir=str(tmp_path / "results")),
            **env(expected_shards='["s-0", "s-1"]'),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_OUTPUT": str(output),
        },
    )
    assert finished.returncode == 2, finished.stdout + finished.stderr  # could not run
    comment = (tmp_path / "results" / "comment.md").read_text()
    assert "shard s-1 uploaded no results" in comment
    assert "s-1" in summary.read_text()
    assert "::error title=kl-bitexact::shard s-1 uploaded no results" in finished.stdout
    assert "\nerror\n" in output.read_text()


def test_registration_findings_are_reported_when_no_shard_ran(cli, tmp_path):
    findings = tmp_path / "findings.json"
    finding = {
        "file": "test/run_suite.py",
        "line": 3,
        "code": "suite-not-allowlisted",
        "severity": "error",
        "message": "suite 'nightly-x' is in no allowlist",
        "fix": "add it",
    }
    findings.write_text(json.dumps({"findings": [finding]}))
    finished = cli(
        ["action"],
        env=env(command="report", results_dir=str(tmp_path / "none"), findings=str(findings)),
    )
    assert finished.returncode == 2, finished.stdout + finished.stderr  # nothing ran
    assert "nightly-x" in (tmp_path / "none" / "comment.md").read_text()


# --- the proof of new tests (issue 19) -----------------------------------------------------


def test_prove_inputs_reach_each_command_line():
    inputs = read_inputs(env(command="run", prove="Strict", base_path="base", proof_dir="p"))
    assert (inputs.prove, inputs.base_path, inputs.proof_dir) == (
        Prove.STRICT,
        Path("base"),
        Path("p"),
    )
    assert run_options(inputs, ["s.yaml"]).prove_base == Path("base")
    proof = [Path("p/proof-a/results.json"), Path("p/proof-b/results.json")]
    published = publish_options(inputs, [Path("r.json")], proof)
    assert (published.shown.proof, published.shown.policy.proof_strict) == (tuple(proof), True)


def test_expected_proofs_reach_report_and_publish_as_the_option():
    matrix = {
        "include": [{"suite": "s", "name": "proof-s", "files": ["s.yaml"], "tests": ["s::t"]}]
    }
    inputs = read_inputs(env(command="publish", prove="true", expected_proofs=json.dumps(matrix)))
    published = publish_options(inputs, [Path("r.json")], [])
    assert [(job.name, job.tests) for job in published.shown.expected_proofs] == [
        ("proof-s", ("s::t",))
    ]
    reported = report_options(inputs, [Path("r.json")], Path("c.md"), None, [])
    assert reported.shown.expected_proofs == published.shown.expected_proofs
    off = read_inputs(env(command="publish", expected_proofs=json.dumps(matrix)))
    assert publish_options(off, [Path("r.json")], []).shown.expected_proofs == ()
    with pytest.raises(ConfigError, match="action input `expected-proofs`: not JSON"):
        read_inputs(env(expected_proofs="{"))


def test_prove_off_adds_nothing():
    inputs = read_inputs(env(command="publish"))
    assert inputs.prove is Prove.OFF
    assert publish_options(inputs, [Path("r.json")], [Path("x.json")]).shown.proof == ()
    assert run_options(inputs, []).prove_base is None


def test_prove_must_be_false_true_or_strict():
    with pytest.raises(ConfigError, match="action input `prove`: 'always' is not one of"):
        read_inputs(env(prove="always"))


# --- registered Python test files in `run` ----------------------------------------------------

SMALL_TEST = "test/registered/test_small.py"
SMALL_SOURCE = (
    "import unittest\n\n\nclass TestSmall(unittest.TestCase):\n"
    "    def test_a(self):\n        pass\n"
)


def test_python_test_files_run_with_pytest_under_the_python_input():
    inputs = read_inputs(env(command="run", python="/opt/engine/bin/python3"))
    assert pytest_options(inputs, ["t/test_x.py"], Path("out")) == pytest_cmd.Options(
        pytest_args=("t/test_x.py",), out=Path("out"), python="/opt/engine/bin/python3"
    )
    proving = dataclasses.replace(inputs, prove=Prove.ON, base_path=Path("b"))
    assert pytest_options(proving, ["t/test_x.py"], Path("p")).prove_base == Path("b")


def test_the_exact_input_makes_suites_and_python_test_files_exact():
    """`exact: true`: any differing logprob fails, for suites (`run --exact`) and for Python
    test files (`pytest --exact`: the logprobs their server answered)."""
    inputs = read_inputs(env(command="run", exact="true"))
    assert run_options(inputs, ["s.yaml"]).exact
    assert pytest_options(inputs, ["t/test_x.py"], Path("o")).exact
    plain = read_inputs(env(command="run"))
    assert not run_options(plain, ["s.yaml"]).exact
    assert not pytest_options(plain, ["t/test_x.py"], Path("o")).exact
    with pytest.raises(ConfigError, match="action input `exact`"):
        read_inputs(env(exact="sometimes"))


def run_action(cli, repo: Path, results_dir: Path, **inputs: str):
    output = results_dir.parent / f"{results_dir.name}.output"
    values = env(command="run", results_dir=str(results_dir), python=sys.executable, **inputs)
    return cli(["action"], cwd=repo, env={**values, "GITHUB_OUTPUT": str(output)}, timeout=300)


def test_suite_files_and_python_files_in_one_run_make_one_results_file(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine", extra={SMALL_TEST: SMALL_SOURCE})
    out = tmp_path / "results"
    finished = run_action(cli, repo.path, out, suites=f"{proof_repo.SUITE_FILE} {SMALL_TEST}")
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-2000:]
    ids = sorted(test.id for _, test in results_io.load(out / "results.json").all_tests())
    assert ids == [
        f"{proof_repo.SUITE}::match",
        f"{proof_repo.SUITE}::prefill_cache_hit",
        f"{SMALL_TEST}::TestSmall::test_a",
    ]
    assert (out / "junit.xml").is_file() and (out / "logs" / "pytest.log").is_file()
    assert [path.name for path in out.rglob("results.json")] == ["results.json"]  # one, merged


def test_the_proof_run_takes_python_files_too(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine", extra={SMALL_TEST: SMALL_SOURCE})
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    changed = SMALL_SOURCE + "\n    def test_b(self):\n        pass\n"
    proof_repo.write(repo.path, SMALL_TEST, changed)
    out = tmp_path / "results-proof"
    finished = run_action(
        cli,
        repo.path,
        out,
        suites=f"{proof_repo.SUITE_FILE} {SMALL_TEST}",
        prove="true",
        base_path=str(base),
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-2000:]
    on_base = {
        test.id: test.status for _, test in results_io.load(out / "results.json").all_tests()
    }
    assert on_base == {
        proof_repo.NEW_TEST: results.Status.FAILED,  # the base's faulty engine
        f"{SMALL_TEST}::TestSmall::test_b": results.Status.PASSED,
    }
    assert (base / SMALL_TEST).read_text() == SMALL_SOURCE  # put back


def test_the_prove_plan_and_shard_steps_read_their_matrices_as_values(cli, tmp_path):
    """prove-plan and shard run in process (issue 29): the step's outputs are the plans'
    matrices, and `args` reaches the command's own parser."""
    repo = proof_repo.create(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    output = tmp_path / "output.txt"
    step = {"GITHUB_OUTPUT": str(output)}
    inputs = env(command="prove-plan", suites=proof_repo.SUITE, base_path=str(base))
    finished = cli(["action"], cwd=repo.path, env={**inputs, **step}, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    written = output.read_text()
    [matrix] = [line for line in written.splitlines() if line.startswith('{"include"')]
    assert json.loads(matrix)["include"][0]["tests"] == [proof_repo.NEW_TEST]
    assert re.search(r"^proof-needed<<(\w+)\ntrue\n\1$", written, re.M)
    output.unlink()
    inputs = env(command="shard", suites=proof_repo.SUITE, partitions="2", args="--nightly")
    finished = cli(["action"], cwd=repo.path, env={**inputs, **step}, timeout=120)
    assert finished.returncode == 2  # --nightly from `args`: no file registered so
    assert "has no enabled file registered with nightly=True" in finished.stderr
    finished = cli(["action"], cwd=repo.path, env={**inputs, "INPUT_ARGS": "", **step})
    assert finished.returncode == 0, finished.stdout + finished.stderr
    [matrix] = [line for line in output.read_text().splitlines() if line.startswith('{"incl')]
    [entry] = json.loads(matrix)["include"]  # one file: one shard of the two asked
    assert entry["name"] == f"{proof_repo.SUITE}-0"


def test_the_lint_ci_step_lints_once_in_process(cli, tmp_path):
    """lint-ci runs in process (issue 29): the findings file is what `lint-ci --format
    json` prints, the annotations what `--format github` prints, the code the same."""
    repo = proof_repo.create(tmp_path / "engine")
    findings = tmp_path / "lint" / "findings.json"
    as_json = cli(["lint-ci", "--format", "json"], cwd=repo.path)
    as_github = cli(["lint-ci", "--format", "github"], cwd=repo.path)
    step = env(command="lint-ci", findings=str(findings))
    finished = cli(["action"], cwd=repo.path, env={**step, "GITHUB_OUTPUT": str(tmp_path / "o")})
    assert finished.returncode == as_json.returncode, finished.stdout + finished.stderr
    assert finished.returncode in (0, 1)
    assert findings.read_text() == as_json.stdout
    assert finished.stdout.endswith(as_github.stdout)


EXPLORED_SUITE = """\
- name: explored
  server:
    engine: reference
    args: [--enable-deterministic-inference, --page-size, "16", --mamba-track-interval, "16",
           --fault, cached-tokens-off-by-one]
  tests:
    - {name: match, check: match, samples: 1, prompt_tokens: [4, 4], max_new_tokens: 1}
"""


def test_the_explore_step_launches_the_suite_s_server_and_writes_what_it_found(cli, tmp_path):
    """The nightly job's step: explore in the token-free child, its summary.md as the job
    summary, `failure` when it found something (docs/workflow.md)."""
    (tmp_path / "explore.yaml").write_text(EXPLORED_SUITE)
    out, summary, output = tmp_path / "found", tmp_path / "summary.md", tmp_path / "output"
    values = env(
        command="explore",
        suites="explore.yaml",
        results_dir=str(out),
        args="--budget 15 --seed 1 --max-findings 1",
        python=sys.executable,
    )
    finished = cli(
        ["action"],
        cwd=tmp_path,
        env={**values, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)},
        timeout=300,
    )
    assert finished.returncode == 1, finished.stdout[-3000:] + finished.stderr[-2000:]
    said = summary.read_text()
    assert "**Found**: cached_tokens" in said and "got " in said
    assert "\nfailure\n" in output.read_text().split("conclusion<<", 1)[1]
    assert (out / "results.json").is_file() and (out / "test_explore_finding_1.py").is_file()
    assert (out / "examples").is_dir()  # the database the nightly job caches
    two = cli(["action"], cwd=tmp_path, env={**values, "INPUT_SUITES": "a.yaml b.yaml"})
    assert two.returncode == 2 and "exactly one suite file" in two.stderr + two.stdout

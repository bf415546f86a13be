"""`kl-bitexact lint-ci` on fixture repositories, each planting one problem (subprocesses)."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.cli import main as kl_bitexact_main

RUN_SUITE = "test/run_suite.py"
KL = "test/registered/kl"
EXTRA = ".github/workflows/pr-test-extra.yml"

# overlay -> the error findings (code, file, line) it must produce, and nothing else
PLANTED = {
    "unknown-suite": {("suite-not-allowlisted", f"{KL}/test_new_stage.py", 6)},
    "undispatched-suite": {("suite-not-dispatched", RUN_SUITE, 15)},
    "empty-suite": {("empty-suite", ".github/workflows/pr-test.yml", 19)},
    "no-registration": {("no-registration", f"{KL}/test_helpers.py", 1)},
    "non-literal": {("non-literal-argument", f"{KL}/test_decode_cache_hit.py", 6)},
    "unknown-argument": {("unknown-argument", f"{KL}/test_decode_cache_hit.py", 5)},
    "not-top-level": {("not-top-level", f"{KL}/test_decode_cache_hit.py", 9)},
    "suite-and-stage": {("suite-and-stage", f"{KL}/test_hicache_bitexact.py", 5)},
    "missing-main": {("missing-main", f"{KL}/test_tp8_bitexact.py", 5)},
    "disabled-without-reason": {("disabled-without-reason", f"{KL}/test_nightly_longbench.py", 6)},
    "bad-blocked-by": {("bad-blocked-by", "test/bitexact/hicache-b200.yaml", 9)},
    "bad-est-time": {("bad-est-time", f"{KL}/test_tp8_bitexact.py", 5)},
    # A typo in runner_config also leaves its old suite empty and names an unknown suite.
    "unknown-runner": {
        ("unknown-runner", f"{KL}/test_tp8_bitexact.py", 5),
        ("suite-not-allowlisted", f"{KL}/test_tp8_bitexact.py", 5),
        ("empty-suite", EXTRA, 19),
    },
    "unlisted-suite-file": {("suite-not-allowlisted", "test/bitexact/gb300.yaml", 2)},
    "glob-matches-nothing": {("empty-suite", ".github/workflows/bitexact.yml", 23)},
    "nightly-unlisted": {("suite-not-allowlisted", f"{KL}/test_nightly_b200.py", 5)},
    "new-backend": {("suite-not-allowlisted", "test/registered/amd/test_kl_amd.py", 5)},
}


def lint_json(cli, root, *extra):
    result = cli(["lint-ci", "--root", str(root), "--format", "json", *extra])
    assert "Traceback" not in result.stderr
    return result, json.loads(result.stdout)["findings"]


def test_the_base_repository_is_clean(cli, make_repo):
    result, findings = lint_json(cli, make_repo())
    assert (result.returncode, findings) == (0, [])


@pytest.mark.parametrize("overlay", sorted(PLANTED))
def test_each_planted_problem_is_found_with_file_and_line(make_repo, capsys, overlay):
    # In-process through the same entry point (a subprocess each would only add start-up).
    code = kl_bitexact_main(["lint-ci", "--root", str(make_repo(overlay)), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    errors = {(f["code"], f["file"], f["line"]) for f in findings if f["severity"] == "error"}
    assert errors == PLANTED[overlay]
    assert code == 1
    assert all(f["message"] and f["fix"] for f in findings)


def test_a_stale_allowlist_entry_is_only_a_warning(cli, make_repo):
    result, findings = lint_json(cli, make_repo("stale-entry"))
    assert result.returncode == 0
    assert [(f["code"], f["severity"], f["line"]) for f in findings] == [
        ("suite-not-dispatched", "warning", 28)
    ]


def test_json_findings_have_exactly_the_contract_keys(cli, make_repo):
    _, findings = lint_json(cli, make_repo("unknown-suite"))
    assert [sorted(f) for f in findings] == [["code", "file", "fix", "line", "message", "severity"]]


def test_text_format_names_file_line_and_fix(cli, make_repo):
    result = cli(["lint-ci", "--root", str(make_repo("unknown-runner"))])
    assert result.returncode == 1
    assert "test/registered/kl/test_tp8_bitexact.py:5: error [unknown-runner]" in result.stdout
    assert "did you mean '8-gpu-h200'?" in result.stdout
    assert "lint-ci: 3 error(s), 0 warning(s)" in result.stdout


def test_github_format_is_workflow_commands(cli, make_repo):
    result = cli(["lint-ci", "--root", str(make_repo("empty-suite")), "--format", "github"])
    assert result.returncode == 1
    assert result.stdout.startswith(
        "::error file=.github/workflows/pr-test.yml,line=19,title=kl-bitexact empty-suite::"
    )
    assert result.stdout.count("\n") == 1


@pytest.mark.parametrize(
    ("overlay", "needle"),
    [
        ("syntax-error", "test/registered/kl/test_tp8_bitexact.py:5: not valid Python"),
        ("bad-config", "unknown key `registry.registred`"),
    ],
)
def test_unreadable_input_is_exit_2_naming_the_place(cli, make_repo, overlay, needle):
    result = cli(["lint-ci", "--root", str(make_repo(overlay))])
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_an_empty_repository_says_nothing_was_checked(cli, tmp_path):
    result, findings = lint_json(cli, tmp_path)
    assert result.returncode == 0
    assert [(f["code"], f["severity"]) for f in findings] == [("nothing-registered", "warning")]


def test_missing_root_is_exit_2(cli, tmp_path):
    result = cli(["lint-ci", "--root", str(tmp_path / "nowhere")])
    assert result.returncode == 2
    assert "repository root not found" in result.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("jobs:\n  a: [\n", "broken.yml:3: not valid YAML"),
        ("jobs: {}\njobs: {}\n", "broken.yml:2: not valid YAML (found duplicate key"),
        ("jobs: \x07\n", "broken.yml: not valid YAML (unacceptable character"),
    ],
)
def test_broken_workflow_yaml_is_exit_2_with_line(cli, make_repo, text, needle):
    root = make_repo()
    (root / ".github/workflows/broken.yml").write_text(text)
    result = cli(["lint-ci", "--root", str(root)])
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_config_file_moves_the_registered_tree(cli, make_repo):
    root = make_repo("no-registration")
    (root / ".kl-bitexact.yaml").write_text(
        "registry:\n  registered: test/registered/**/*.py\n"
        "  exclude: ['**/conftest.py', '**/__init__.py', '**/test_helpers.py']\n"
    )
    result, findings = lint_json(cli, root)
    assert (result.returncode, findings) == (0, [])


def test_config_option_and_extra_runners(cli, make_repo, tmp_path):
    root = make_repo("unknown-runner")
    config = tmp_path / "ci.yaml"
    config.write_text("registry:\n  runners: [8-gpu-h2OO]\n")
    _, findings = lint_json(cli, root, "--config", str(config))
    assert "unknown-runner" not in {f["code"] for f in findings}


def test_a_registered_file_s_syntax_warnings_stay_out_of_the_output(cli, make_repo):
    # lint-ci parses the repository's Python, never runs it: `1if` (a SyntaxWarning when
    # compiled) is not lint-ci's or shard's to print (found by tests/test_fuzz.py).
    root = make_repo()
    path = root / "test" / "registered" / "cpu" / "test_kl_metric_cpu.py"
    text = path.read_text().replace("est_time=5,", "est_time=5if True else 6,")
    assert "5if" in text
    path.write_text(text)
    for command in (["lint-ci"], ["shard", "--suite", "base-a-test-cpu", "--partitions", "2"]):
        result = cli([*command, "--root", str(root)])
        assert "SyntaxWarning" not in result.stderr, result.stderr

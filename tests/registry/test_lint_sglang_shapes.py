"""`lint-ci` on the CI layouts sglang really writes (issue 16): dispatches followed through
env, shell variables, reusable workflows and matrices; only the configured runner script
counts; cadence, per-backend validation and per-file timeouts as run_suite.py applies them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.cli import main as kl_bitexact_main
from kl_bitexact.registry import suiterunner, workflows, yamlio

KL = "test/registered/kl"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "registry"


def lint(root, capsys, *extra):
    code = kl_bitexact_main(["lint-ci", "--root", str(root), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)["findings"]


# --- problem 1: `$SUITE` from env at workflow, job and step level -------------------------


@pytest.mark.parametrize("level", ["workflow", "job", "step"])
def test_a_suite_passed_through_env_and_a_shell_variable_is_dispatched(make_repo, capsys, level):
    # Before: `--suite "$SUITE"` was an empty suite named '$SUITE', and base-a-test-cpu
    # was reported as dispatched by no workflow.
    code, findings = lint(make_repo(f"suite-env-{level}"), capsys)
    assert (code, findings) == (0, [])


@pytest.mark.parametrize(("level", "line"), [("workflow", 17), ("job", 18), ("step", 22)])
def test_the_env_dispatch_is_located_where_it_is_written(make_repo, level, line):
    root = make_repo(f"suite-env-{level}")
    text = (root / ".github/workflows/pr-test.yml").read_text()
    found = workflows.read_workflow(text, "pr-test.yml")
    cpu = [d for d in found.dispatches if d.suite == "base-a-test-cpu"]
    assert [(d.backend, d.nightly, d.runner_line) for d in cpu] == [("cpu", False, line)]
    assert found.unresolved == ()


def test_an_unresolvable_suite_is_one_warning_naming_the_expression_never_a_name(make_repo, capsys):
    code, findings = lint(make_repo("unresolved-dispatch"), capsys)
    unresolved = [f for f in findings if f["code"] == "unresolved-dispatch"]
    assert [(f["file"], f["line"], f["severity"]) for f in unresolved] == [
        (".github/workflows/pr-test.yml", 16, "warning")
    ]
    assert "${{ needs.plan.outputs.cpu_suite }}" in unresolved[0]["message"]
    assert not any("$" in f["message"] for f in findings if f["code"] == "empty-suite")
    assert code == 1  # base-a-test-cpu is really not dispatched any more


def _values(combination: dict[str, Any] | None) -> dict[str, Any]:
    """A job's matrix values (None only for a job the matrix could not expand)."""
    assert combination is not None
    return dict(combination)


def test_matrix_include_exclude_flow_and_block_style():
    text = (FIXTURES / "base/.github/workflows/pr-test-extra.yml").read_text()
    document = yamlio.load(text, "x.yml")
    assert document is not None
    flow = workflows.matrix_combinations(document["jobs"]["extra-test"]["strategy"]["matrix"], None)
    assert [(_values(c)["stage"], _values(c)["runner_config"], line) for c, line in flow] == [
        ("extra-b", "4-gpu-b200", 17),
        ("extra-b", "8-gpu-h200", 19),
    ]
    loaded = yamlio.load(
        "m:\n  os: [a, b]\n  gpu:\n    - 1\n    - 2\n  exclude:\n    - {os: b, gpu: 2}\n"
        "  include:\n    - os: a\n      extra: yes\n    - os: c\n      gpu: 8\n",
        "m.yml",
    )
    assert loaded is not None
    block = loaded["m"]
    combos = [_values(c) for c, _ in workflows.matrix_combinations(block, None)]
    assert combos == [
        {"os": "a", "gpu": 1, "extra": "yes"},
        {"os": "a", "gpu": 2, "extra": "yes"},
        {"os": "b", "gpu": 1},
        {"os": "c", "gpu": 8},
    ]


def test_a_reusable_workflow_is_read_once_per_caller_entry(make_repo):
    root = make_repo()
    documents = {
        f".github/workflows/{p.name}": yamlio.load(p.read_text(), p.name)
        for p in (root / ".github/workflows").iterdir()
    }
    found = workflows.read_all(documents)
    through_stage = {
        (d.suite, d.file, d.line, d.timeout)
        for d in found.dispatches
        if d.runner_file == ".github/workflows/_pr-test-stage.yml"
    }
    assert through_stage == {
        ("base-b-test-1-gpu-large", ".github/workflows/pr-test.yml", 19, None),
        ("extra-b-test-4-gpu-b200", ".github/workflows/pr-test-extra.yml", 17, 1800.0),
        ("extra-b-test-8-gpu-h200", ".github/workflows/pr-test-extra.yml", 19, None),
    }


# --- problem 3: only the configured runner script, matched by path ------------------------


def test_other_scripts_named_run_suite_are_not_dispatches(make_repo, capsys):
    # multimodal_gen's run_suite.py --suite 1-gpu, test/srt's and test/lang's: not ours.
    code, findings = lint(make_repo("other-runner-script"), capsys)
    assert (code, findings) == (0, [])


def test_the_runner_path_comes_from_the_config(make_repo, capsys):
    root = make_repo("other-runner-script")
    (root / ".kl-bitexact.yaml").write_text("registry:\n  suite-runners: [test/srt/run_suite.py]\n")
    _, findings = lint(root, capsys)
    empty = {f["message"].split("'")[1] for f in findings if f["code"] == "empty-suite"}
    assert empty == {"per-commit-1-gpu"}


# --- problem 2: cadence ------------------------------------------------------------------


def test_nightly_flag_against_the_cadence_the_suite_runs_at(make_repo, capsys):
    code, findings = lint(make_repo("cadence-mismatch"), capsys)
    cadence = {(f["file"], f["line"]) for f in findings if f["code"] == "cadence-mismatch"}
    assert cadence == {
        (f"{KL}/test_nightly_forgotten.py", 5),
        (f"{KL}/test_per_commit_marked_nightly.py", 5),
    }
    assert code == 1


def test_cadence_from_the_allowlist_when_no_workflow_runs_the_suite(make_repo, capsys):
    root = make_repo("cadence-mismatch")
    (root / ".github/workflows/nightly.yml").unlink()
    _, findings = lint(root, capsys)
    cadence = {f["file"]: f["message"] for f in findings if f["code"] == "cadence-mismatch"}
    assert "a nightly suite in test/run_suite.py" in cadence[f"{KL}/test_nightly_forgotten.py"]


# --- problem 4: per-backend validation, read from run_suite.py ----------------------------


def test_a_checked_backend_unknown_suite_fails_every_job(make_repo, capsys):
    _, cuda = lint(make_repo("unknown-suite"), capsys)
    [finding] = [f for f in cuda if f["code"] == "suite-not-allowlisted"]
    assert "validates cuda suite names before running anything" in finding["message"]
    assert "every job that runs it fails" in finding["message"]


def test_an_unchecked_backend_unknown_suite_never_runs_or_runs_with_a_warning(make_repo, capsys):
    _, amd = lint(make_repo("new-backend"), capsys)
    by_file = {f["file"]: f for f in amd if f["code"] == "suite-not-allowlisted"}
    never = by_file["test/registered/amd/test_kl_amd.py"]
    assert (never["severity"], "silently never runs" in never["message"]) == ("error", True)
    runs = by_file["test/registered/amd/test_small_amd.py"]
    assert runs["severity"] == "warning"
    assert "the file still runs" in runs["message"]


def test_checked_backends_read_from_the_runner_or_configured(make_repo, capsys):
    source = "_SUITE_CHECKED_BACKENDS = {HWBackend.CUDA, HWBackend.MLX}\n"
    assert suiterunner.read(source, "r.py").checked_backends == frozenset({"cuda", "mlx"})
    assert suiterunner.read("PER_COMMIT_SUITES = {}\n", "r.py").checked_backends is None
    root = make_repo("new-backend")
    (root / ".kl-bitexact.yaml").write_text("registry:\n  checked-backends: [amd, cuda]\n")
    _, findings = lint(root, capsys)
    [finding] = [f for f in findings if f["file"].endswith("test_kl_amd.py")]
    assert "validates amd suite names" in finding["message"]


# --- problem 6: timeouts -----------------------------------------------------------------


def test_est_time_above_the_matrix_timeout_per_file(make_repo, capsys):
    code, findings = lint(make_repo("timeout-exceeded"), capsys)
    [finding] = [f for f in findings if f["code"] == "timeout-exceeded"]
    assert (finding["file"], finding["line"]) == (f"{KL}/test_long_eval.py", 5)
    assert "1800 s per-file limit" in finding["message"]
    assert code == 1


def test_timeout_defaults_come_from_the_runner():
    source = (
        "parser.add_argument('--timeout-per-file', type=int, default=900)\n"
        "parser.add_argument('--retry-timeout-increase', type=int, default=300)\n"
    )
    semantics = suiterunner.read(source, "r.py")
    assert (semantics.timeout_per_file, semantics.retry_timeout_increase) == (900.0, 300.0)


# --- problem 8: every finding has a line -------------------------------------------------

OVERLAYS = sorted(
    path.name
    for path in FIXTURES.iterdir()
    if path.is_dir() and path.name not in ("base", "syntax-error", "bad-config")
)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_finding_has_a_line(make_repo, capsys, overlay):
    _, findings = lint(make_repo(overlay), capsys)
    assert all(isinstance(f["line"], int) and f["line"] >= 1 for f in findings)


def test_an_empty_repository_finding_has_a_line_too(tmp_path, capsys):
    _, findings = lint(tmp_path, capsys)
    assert [f["line"] for f in findings] == [1]

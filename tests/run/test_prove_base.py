"""The proof of new tests with real processes and real checkouts (issue 19), no act:

prove-plan finds the test the PR adds; `run --prove-base` runs only it, on the base
revision's engine (its faulty launch script); `report --proof` shows it proven with both
KLs. The act end-to-end test (tests/action/test_act_e2e.py) runs the same through the
reusable workflow.
"""

from __future__ import annotations

import json

import proof_repo

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status


def test_prove_plan_lists_only_the_new_test(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    planned = cli(["prove-plan", "--base", str(base), "--suite", proof_repo.SUITE], cwd=repo.path)
    assert planned.returncode == 0, planned.stderr
    [entry] = json.loads(planned.stdout)["include"]
    assert entry == {
        "suite": proof_repo.SUITE,
        "name": f"proof-{proof_repo.SUITE}",
        "files": [proof_repo.SUITE_FILE],
        "tests": [proof_repo.NEW_TEST],
    }
    # Against itself nothing is new: an empty matrix, so no proof job.
    same = cli(["prove-plan", "--base", str(repo.path), "--suite", proof_repo.SUITE], cwd=repo.path)
    assert json.loads(same.stdout) == {"include": []}


def test_the_new_test_is_red_on_base_green_on_head_and_reported_proven(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    suite = proof_repo.SUITE_FILE
    proving = cli(
        ["run", suite, "--prove-base", str(base), "--out", str(tmp_path / "proof")], cwd=repo.path
    )
    assert proving.returncode == 0, proving.stdout + proving.stderr  # red on base is the point
    [(_, on_base)] = results_io.load(tmp_path / "proof" / "results.json").all_tests()
    assert on_base.id == proof_repo.NEW_TEST and on_base.status is Status.FAILED
    assert on_base.kl_div and on_base.kl_div > 1e-9
    head = cli(["run", suite, "--out", str(tmp_path / "head")], cwd=repo.path)
    assert head.returncode == 0, head.stdout + head.stderr
    reported = cli(
        [
            "report",
            str(tmp_path / "head" / "results.json"),
            "--proof",
            str(tmp_path / "proof" / "results.json"),
        ]
    )
    assert reported.returncode == 0, reported.stderr
    assert "🧪 1 proven" in reported.stdout
    assert "**proven** - red on base, green on head: KL " in reported.stdout
    assert " -> 0 · differing logprobs " in reported.stdout


def test_a_base_that_cannot_run_the_test_could_not_prove(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    (base / "engine" / "serve.sh").write_text("#!/bin/sh\necho 'unknown flag' >&2\nexit 2\n")
    out = tmp_path / "proof"
    proving = cli(
        ["run", proof_repo.SUITE_FILE, "--prove-base", str(base), "--out", str(out)], cwd=repo.path
    )
    assert proving.returncode == 0, proving.stdout + proving.stderr
    head = cli(["run", proof_repo.SUITE_FILE, "--out", str(tmp_path / "head")], cwd=repo.path)
    reported = cli(
        ["report", str(tmp_path / "head" / "results.json"), "--proof", str(out / "results.json")]
    )
    assert head.returncode == 0 and reported.returncode == 0, reported.stderr
    assert "**could not prove** - the base run errored" in reported.stdout
    assert "not gating" in reported.stdout


def test_prove_plan_with_nothing_new_says_so_on_stderr(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine")
    same = cli(["prove-plan", "--base", str(repo.path), "--suite", proof_repo.SUITE], cwd=repo.path)
    assert same.returncode == 0 and json.loads(same.stdout) == {"include": []}
    assert f"prove-plan: suite {proof_repo.SUITE}: no test added or changed" in same.stderr


def test_prove_plan_of_an_unknown_suite_is_an_error_with_did_you_mean(cli, tmp_path):
    # It printed {"include":[]} and exited 0: no new test was ever proven, and nobody knew.
    repo = proof_repo.create(tmp_path / "engine")
    typo = proof_repo.SUITE.replace("b200", "b20")
    done = cli(["prove-plan", "--base", str(repo.path), "--suite", typo], cwd=repo.path)
    assert done.returncode == 2 and done.stdout == ""
    assert f"--suite {typo}: no file registers this suite" in done.stderr
    assert f"hint: did you mean '{proof_repo.SUITE}'?" in done.stderr


def test_prove_plan_of_a_suite_outside_the_suite_folder_names_its_file(cli, tmp_path):
    repo = proof_repo.create(tmp_path / "engine")
    (repo.path / "ci").mkdir()
    (repo.path / proof_repo.SUITE_FILE).rename(repo.path / "ci" / "engine.yaml")
    done = cli(["prove-plan", "--base", str(repo.path), "--suite", proof_repo.SUITE], cwd=repo.path)
    assert done.returncode == 2, done.stderr
    assert (
        f"--suite {proof_repo.SUITE}: defined in ci/engine.yaml, outside the files" in done.stderr
    )
    assert "registry.suite-files" in done.stderr


def test_prove_plan_says_why_a_symlinked_suite_file_escaping_the_checkout_is_not_read(
    cli, tmp_path
):
    # It printed an empty plan, exit 0, no word (issue 30, item 9).
    repo = proof_repo.create(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    outside = tmp_path / "elsewhere.yaml"
    (repo.path / proof_repo.SUITE_FILE).rename(outside)
    (repo.path / proof_repo.SUITE_FILE).symlink_to(outside)
    done = cli(["prove-plan", "--base", str(base), "--suite", proof_repo.SUITE], cwd=repo.path)
    assert done.returncode == 2, done.stderr
    assert (
        f"prove-plan: {proof_repo.SUITE_FILE}: resolves outside the checkout (a symlink), so it "
        "is not read" in done.stderr
    )
    assert f"not read: {proof_repo.SUITE_FILE} (outside the checkout)" in done.stderr

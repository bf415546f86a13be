"""The proof of new tests for registered Python test files, with real checkouts (issue 19):
prove-plan lists what the PR adds or changes per test, class or file; `pytest --prove-base`
runs the head's file with the base checkout's engine package (tests/helpers/proof_repo.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import proof_repo
import sglang_wheel

import kl_bitexact
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status, TestResult


def plan(cli, repo: proof_repo.ProofRepo, base: Path) -> tuple[list[dict], str]:
    planned = cli(
        ["prove-plan", "--base", str(base), "--suite", proof_repo.PY_SUITE], cwd=repo.path
    )
    assert planned.returncode == 0, planned.stderr
    return json.loads(planned.stdout)["include"], planned.stderr


def test_prove_plan_lists_the_new_and_changed_tests_of_registered_python_files(cli, tmp_path):
    repo = proof_repo.create_pytest(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    [entry], _ = plan(cli, repo, base)
    assert entry == {
        "suite": proof_repo.PY_SUITE,
        "name": f"proof-{proof_repo.PY_SUITE}",
        "files": [proof_repo.PY_FILE, proof_repo.PY_NEW_FILE],
        # the changed and the added method of the class, and the new file as a whole
        "tests": [proof_repo.PY_MATCH, proof_repo.PY_DECODE, proof_repo.PY_NEW_FILE],
    }
    # Against itself nothing is new: no proof job.
    assert plan(cli, repo, repo.path)[0] == []


def test_prove_plan_never_reads_a_base_file_that_resolves_outside_the_base(cli, tmp_path):
    repo = proof_repo.create_pytest(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'hunter2-not-for-prove-plan'\n")
    (base / proof_repo.PY_FILE).unlink()
    (base / proof_repo.PY_FILE).symlink_to(secret)
    [entry], stderr = plan(cli, repo, base)
    # not read, so the whole file counts as new, and the reason names only the path
    assert proof_repo.PY_FILE in entry["tests"]
    assert f"{proof_repo.PY_FILE} on the base revision: resolves outside the checkout" in stderr
    assert "hunter2" not in stderr + json.dumps(entry)


def prove(repo: proof_repo.ProofRepo, base: Path, out: Path, env: dict[str, str], *files: str):
    command = ["pytest", "--prove-base", str(base), "--out", str(out), "--", "-p", "sglang_wheel"]
    return subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command, *files],
        cwd=repo.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def by_id(path: Path) -> dict[str, TestResult]:
    return {test.id: test for _, test in results_io.load(path).all_tests()}


def test_the_head_file_runs_on_the_base_engine_and_each_outcome_is_reported(
    cli, tmp_path, sglang_oracle
):
    repo = proof_repo.create_pytest(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    # The head's engine first on the path, as an install of the head would put it: the
    # proof must still import the base's (python/ of the base checkout, put before it).
    env = sglang_wheel.child_env(tmp_path, pythonpath=[str(repo.path / "python")])
    files = (proof_repo.PY_FILE, proof_repo.PY_NEW_FILE)
    proving = prove(repo, base, tmp_path / "proof", env, *files)
    assert proving.returncode == 0, proving.stdout[-3000:] + proving.stderr[-2000:]
    on_base = by_id(tmp_path / "proof" / "results.json")
    assert sorted(on_base) == sorted(
        [proof_repo.PY_MATCH, proof_repo.PY_DECODE, proof_repo.PY_NEW_FILE]
    )
    decode = on_base[proof_repo.PY_DECODE]
    assert decode.status is Status.FAILED and decode.kl_div and decode.kl_div > 1e-6
    assert on_base[proof_repo.PY_MATCH].status is Status.PASSED
    unimportable = on_base[proof_repo.PY_NEW_FILE]
    assert unimportable.status is Status.ERROR
    assert "does not import on the base revision: ImportError: cannot import name 'PAGE_SIZE'" in (
        unimportable.message
    )
    # The base checkout is as it was: the head's files were put there for the run only.
    assert proof_repo.git(base, "status", "--porcelain", "--untracked-files=all") == ""

    head_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kl_bitexact",
            "pytest",
            "--out",
            str(tmp_path / "head"),
            "--",
            "-p",
            "sglang_wheel",
            *files,
        ],
        cwd=repo.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert head_run.returncode == 0, head_run.stdout[-3000:]
    reported = cli(
        [
            "report",
            str(tmp_path / "head" / "results.json"),
            "--proof",
            str(tmp_path / "proof" / "results.json"),
        ]
    )
    assert reported.returncode == 0, reported.stderr
    assert (
        "🧪 1 proven · 🔎 1 not shown to detect anything · ❔ 1 could not prove"
    ) in reported.stdout
    assert "**proven** - red on base, green on head: KL " in reported.stdout
    assert "test&#95;paged&#95;layout</code>" in reported.stdout  # the head test under the file


def test_a_base_file_that_is_a_symlink_is_never_written_through(tmp_path):
    repo = proof_repo.create_pytest(tmp_path / "engine")
    base = proof_repo.checkout(repo, repo.base, tmp_path / "base")
    outside = tmp_path / "outside.py"
    outside.write_text("KEEP = 'unchanged'\n")
    (base / proof_repo.PY_FILE).unlink()
    (base / proof_repo.PY_FILE).symlink_to(outside)
    env = {**os.environ, "PYTHONPATH": str(Path(kl_bitexact.__file__).parents[1])}
    command = ["pytest", "--prove-base", str(base), "--out", str(tmp_path / "proof"), "--"]
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command, proof_repo.PY_FILE],
        cwd=repo.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert outside.read_text() == "KEEP = 'unchanged'\n"
    [entry] = by_id(tmp_path / "proof" / "results.json").values()
    assert (entry.id, entry.status) == (proof_repo.PY_FILE, Status.ERROR)
    assert "resolves outside the base checkout (a symlink), so it is not written" in entry.message


SELECTION_BASE = """\
import pytest


def test_plain():
    pass


class TestKept:
    def test_same(self):
        pass

    def test_edited(self):
        assert 1


class TestOther:
    def test_untouched(self):
        pass
"""


def test_only_the_new_and_changed_units_run_parametrized_tests_with_their_function(tmp_path):
    repo = tmp_path / "repo"
    file = "test/registered/test_sel.py"
    proof_repo.write(repo, file, SELECTION_BASE)
    base = tmp_path / "base"
    proof_repo.write(base, file, SELECTION_BASE)
    head = SELECTION_BASE.replace("assert 1", "assert 2").replace(
        "class TestOther:",
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_param(n):\n    pass\n\n\nclass TestOther:",
    )
    proof_repo.write(repo, file, head)
    env = {**os.environ, "PYTHONPATH": str(Path(kl_bitexact.__file__).parents[1])}
    command = ["pytest", "--prove-base", str(base), "--out", str(tmp_path / "proof"), "--", file]
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(by_id(tmp_path / "proof" / "results.json")) == [
        f"{file}::TestKept::test_edited",
        f"{file}::test_param[1]",
        f"{file}::test_param[2]",
    ]
    assert (base / file).read_text() == SELECTION_BASE

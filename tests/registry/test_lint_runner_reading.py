"""`lint-ci` reads what the suite runner does instead of assuming it (issue 25): the files it
collects (its glob calls and `endswith` exclusions), the per-file timeout it sets (none when
it sets none), that it accepts `est_time=0`; a registration `disabled=` on purpose is not a
file that "silently never runs"; a runner table is checked only for the backends it lists."""

from __future__ import annotations

import ast
import json
import os

import pytest

from kl_bitexact.cli import main as kl_bitexact_main
from kl_bitexact.registry import collection, config, repo
from kl_bitexact.registry.collection import Root


def lint(root, capsys):
    code = kl_bitexact_main(["lint-ci", "--root", str(root), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["findings"]


@pytest.mark.parametrize(
    "overlay",
    [
        # before: an empty-suite error for the kernel suite (its files live under python/)
        # and a no-registration error for the helper run_suite.py leaves out
        "runner-collects",
        # before: bad-est-time, though sglang's collect_tests takes est_time=0
        "est-time-zero",
        # before: "silently never runs" for a file disabled on purpose, whose backend's
        # suite names the runner does not check
        "disabled-unlisted",
        # before: unknown-runner for an AMD runner_config checked against CUDA's table
        "amd-runner-config",
        # before: timeout-exceeded against an assumed 1200 s the runner never sets
        "no-default-timeout",
    ],
)
def test_what_the_runner_accepts_is_not_reported(make_repo, capsys, overlay):
    assert lint(make_repo(overlay), capsys) == (0, [])


def test_the_runner_collects_its_own_globs_and_leaves_out_its_exclusions(make_repo):
    root = make_repo("runner-collects")
    state = repo.read(root, config.load(root, None))
    files = {scanned.path for scanned in state.files}
    assert "python/pkg/kernels/tests/fused/test_fused_rope.py" in files
    assert "test/registered/cpu/helpers.py" not in files
    assert "python/pkg/kernels/bench/bench_rmsnorm.py" not in files
    assert "python/pkg/kernels/tests/conftest_like_helper.py" not in files
    assert state.registered == (
        Root(
            "test/registered/**/*.py",
            ("**/conftest.py", "**/__init__.py", "**/cpu/helpers.py"),
        ),
        Root("python/pkg/kernels/tests/**/test_*.py"),
    )


def test_configured_globs_override_the_runners(make_repo):
    root = make_repo("runner-collects")
    (root / ".kl-bitexact.yaml").write_text("registry:\n  registered: [test/registered/**/*.py]\n")
    state = repo.read(root, config.load(root, None))
    assert not any(s.path.startswith("python/") for s in state.files)


def test_a_disabled_registration_still_fails_a_runner_that_validates_its_backend(make_repo, capsys):
    root = make_repo("disabled-unlisted")
    path = root / "test/registered/amd/test_parked_amd.py"
    path.write_text(path.read_text().replace("register_amd_ci", "register_cpu_ci"))
    code, findings = lint(root, capsys)
    assert code == 1
    assert [f["code"] for f in findings] == ["suite-not-allowlisted"]
    assert "every job that runs it fails" in findings[0]["message"]


def test_a_runs_own_retry_timeout_increase_counts(make_repo, capsys):
    # Before: --enable-retry added the runner's default 600 s even where the run passes
    # --retry-timeout-increase 0, so a 900 s file under a 600 s limit looked fine.
    root = make_repo(None)
    workflow = root / ".github/workflows/pr-test.yml"
    workflow.write_text(
        workflow.read_text().replace(
            "--suite base-a-test-cpu",
            "--suite base-a-test-cpu --timeout-per-file 600 --enable-retry "
            "--retry-timeout-increase 0",
        )
    )
    test = root / "test/registered/cpu/test_kl_metric_cpu.py"
    test.write_text(test.read_text().replace("est_time=5", "est_time=900"))
    code, findings = lint(root, capsys)
    assert code == 1
    assert [(f["code"], f["file"]) for f in findings] == [
        ("timeout-exceeded", "test/registered/cpu/test_kl_metric_cpu.py")
    ]
    assert "600 s per-file limit" in findings[0]["message"]


PATHLIB_RUNNER = """
from pathlib import Path
HERE = Path(__file__).resolve().parent
def files():
    return sorted(HERE.rglob("test_*.py")) + list((HERE.parent / "kernels").glob("t_*.py"))
"""


def test_pathlib_globs_are_read_too():
    roots = collection.read(ast.parse(PATHLIB_RUNNER), "ci/run_suite.py")
    assert roots == (Root("ci/**/test_*.py"), Root("kernels/t_*.py"))


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("import glob\nfiles = glob.glob(pattern)\n", "'pattern' has no single assignment"),
        ("import glob\nfiles = glob.glob('tests/*.py')\n", "not under the repository"),
        (
            "import glob, os\nd = os.path.dirname(__file__)\n"
            "f = [x for x in glob.glob(os.path.join(d, '*.py')) if 'tmp' not in x]\n",
            "a filter other than",
        ),
        ("def main():\n    pass\n", "calls no glob"),
    ],
)
def test_a_runner_it_cannot_read_says_why_and_the_configured_globs_stay(source, why):
    found = collection.read(ast.parse(source), "test/run_suite.py")
    assert isinstance(found, str) and why in found


def test_fix_never_allowlists_a_suite_whose_tests_are_all_disabled(cli, make_repo, snapshot):
    # Before: --fix added a suite whose only registration is disabled to the allowlist,
    # and the next lint called that entry stale. With a validated backend the suite name
    # fails every job, so it is reported, and --fix says why it does not act.
    root = make_repo("disabled-unlisted")
    path = root / "test/registered/amd/test_parked_amd.py"
    path.write_text(path.read_text().replace("register_amd_ci", "register_cpu_ci"))
    before = snapshot(root)
    result = cli(["lint-ci", "--root", str(root), "--fix"])
    assert snapshot(root) == before
    assert "not fixed: 'nightly-amd-8-gpu-parked': every registration to it is disabled" in (
        result.stderr
    )
    assert result.returncode == 1


@pytest.mark.parametrize("size", [1, 2])
def test_shard_plans_the_kernel_files_the_runner_collects_as_sglang_does(
    cli, make_repo, sglang_oracle, size
):
    # Before: "suite 'base-b-kernel-unit-1-gpu-large' has no enabled test file" (exit 2):
    # its files live under python/, which only the runner's own globs reach.
    ci = sglang_oracle("ci.ci_register")
    root = make_repo("runner-collects")
    suite = "base-b-kernel-unit-1-gpu-large"
    command = ["shard", "--root", str(root), "--suite", suite, "--format", "sglang"]
    result = cli([*command, "--partitions", str(size)])
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)[suite]["files"]
    kernels = sorted((root / "python/pkg/kernels/tests").rglob("test_*.py"))
    tests = ci.collect_tests([str(path) for path in kernels])
    theirs = [
        sorted(os.path.relpath(t.filename, root) for t in ci.auto_partition(tests, i, size))
        for i in range(size)
    ]
    assert [sorted(files) for files in planned] == theirs
    assert sum(len(files) for files in planned) == 2

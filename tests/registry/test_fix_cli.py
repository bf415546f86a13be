"""`lint-ci --fix` round trips: the minimal edit, comments kept, a second run changes nothing."""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "registry"


def materialize(overlay, target):
    shutil.copytree(FIXTURES / "base", target)
    if overlay is not None:
        shutil.copytree(FIXTURES / overlay, target, dirs_exist_ok=True)
    return target


def fix(cli, root):
    return cli(["lint-ci", "--root", str(root), "--fix"])


def changed_lines(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, list[str]]:
    """Per changed file, the diff lines (+/-) between two snapshots."""
    changes = {}
    for path in sorted(set(before) | set(after)):
        old = before.get(path, b"").decode().splitlines()
        new = after.get(path, b"").decode().splitlines()
        diff = [
            line
            for line in difflib.unified_diff(old, new, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        if diff:
            changes[path] = diff
    return changes


# overlay -> exactly the lines --fix changes
EXPECTED = {
    "new-backend": {
        "test/run_suite.py": [
            '+    HWBackend.AMD: ["stage-a-test-1-gpu-amd", "stage-a-test-small-amd"],'
        ],
        ".github/workflows/pr-test-amd.yml": ["+          - stage-a-test-1-gpu-amd"],
    },
    "nightly-unlisted": {
        "test/run_suite.py": [
            '-    HWBackend.CUDA: ["nightly-1-gpu"],',
            '+    HWBackend.CUDA: ["nightly-1-gpu", "nightly-4-gpu-b200"],',
        ],
        ".github/workflows/nightly.yml": [
            "-        suite: [nightly-1-gpu]",
            "+        suite: [nightly-1-gpu, nightly-4-gpu-b200]",
        ],
    },
    "unlisted-suite-file": {
        ".github/kl-bitexact-allowlist.yaml": ["+  - bitexact-gb300"],
        ".github/workflows/bitexact.yml": [
            "-      suites: bitexact-b200  # the B200 fleet",
            "+      suites: bitexact-b200 bitexact-gb300  # the B200 fleet",
        ],
    },
}


@pytest.mark.parametrize("overlay", sorted(EXPECTED))
def test_fix_makes_the_minimal_edit_lint_passes_and_a_rerun_changes_nothing(
    cli, make_repo, snapshot, overlay
):
    root = make_repo(overlay)
    before = snapshot(root)
    result = fix(cli, root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fixed: added" in result.stderr
    fixed = snapshot(root)
    assert changed_lines(before, fixed) == EXPECTED[overlay]
    again = fix(cli, root)
    assert (again.returncode, snapshot(root)) == (0, fixed)
    assert not any(line.startswith("fixed:") for line in again.stderr.splitlines())


def test_a_new_entry_copies_no_timeout_its_siblings_do_not_share(cli, make_repo, snapshot):
    # The only sibling has timeout_per_file '': one neighbour's per-runner timeout is no
    # evidence for the newcomer. Without it the 1700 s file exceeds run_suite.py's 1200 s
    # default, which the lint then says, as a finding for a human.
    root = make_repo("undispatched-suite")
    before = snapshot(root)
    result = fix(cli, root)
    assert changed_lines(before, snapshot(root)) == {
        ".github/workflows/pr-test-extra.yml": [
            "+          - { stage: extra-b, runner_config: 4-gpu-b200 }"
        ]
    }
    assert "its matrix already runs stage extra-b for cuda on 8-gpu-h200" in result.stderr
    assert "not copied, as its entries differ or are too few: timeout_per_file ('')" in (
        result.stderr
    )
    assert result.returncode == 1
    assert "[timeout-exceeded]" in result.stdout
    assert "fix: needs a human: " in result.stdout


@pytest.mark.parametrize("overlay", ["new-backend", "unknown-runner"])
def test_a_partial_fix_is_also_stable(cli, make_repo, snapshot, overlay):
    root = make_repo(overlay)
    fix(cli, root)
    once = snapshot(root)
    second = fix(cli, root)
    assert snapshot(root) == once
    assert not any(line.startswith("fixed:") for line in second.stderr.splitlines())


def test_fix_keeps_comments_and_layout(cli, make_repo, snapshot):
    root = make_repo("undispatched-suite")
    before = snapshot(root)
    fix(cli, root)
    after = snapshot(root)
    path = ".github/workflows/pr-test-extra.yml"
    old, new = before[path].decode(), after[path].decode()
    assert old != new
    assert [line for line in old.splitlines() if "#" in line] == [
        line for line in new.splitlines() if "#" in line
    ]


def test_a_suite_of_a_stage_no_job_runs_is_left_to_a_human(cli, make_repo, snapshot):
    # Issue 16, problem 5: a new stage is neither allowlisted nor put in a neighbour's job.
    root = make_repo("unknown-suite")
    before = snapshot(root)
    result = fix(cli, root)
    assert snapshot(root) == before
    assert result.returncode == 1
    assert (
        "not fixed: 'extra-c-test-4-gpu-b200': no job's matrix runs stage 'extra-c' for cuda"
        in result.stderr
    )
    assert "fix: needs a human (--fix does not: no job's matrix runs stage 'extra-c'" in (
        result.stdout
    )


def test_fix_never_registers_a_typo(cli, make_repo, snapshot):
    root = make_repo("unknown-runner")
    before = snapshot(root)
    result = fix(cli, root)
    assert snapshot(root) == before
    assert result.returncode == 1


def test_fix_creates_the_yaml_allowlist_when_missing(cli, make_repo):
    root = make_repo("unlisted-suite-file")
    allowlist = root / ".github/kl-bitexact-allowlist.yaml"
    allowlist.unlink()
    result = fix(cli, root)
    assert result.returncode == 0, result.stdout
    text = allowlist.read_text()
    assert text.startswith("# Suites CI runs")
    assert "  - bitexact-b200\n" in text and "  - bitexact-gb300\n" in text


def test_fix_does_not_follow_a_symlink_out_of_the_repository(cli, make_repo, tmp_path):
    root = make_repo("unlisted-suite-file")
    outside = tmp_path / "outside.yaml"
    outside.write_text("suites: [elsewhere]\n")
    allowlist = root / ".github/kl-bitexact-allowlist.yaml"
    allowlist.unlink()
    allowlist.symlink_to(outside)
    result = fix(cli, root)
    assert outside.read_text() == "suites: [elsewhere]\n"
    assert "resolves outside the repository" in result.stderr
    assert result.returncode == 1


def test_fix_suite_limits_the_fix_to_one_suite(cli, make_repo, snapshot):
    root = make_repo("new-backend")
    before = snapshot(root)
    result = cli(["lint-ci", "--root", str(root), "--fix", "--suite", "stage-a-test-small-amd"])
    assert changed_lines(before, snapshot(root)) == {
        "test/run_suite.py": ['+    HWBackend.AMD: ["stage-a-test-small-amd"],']
    }
    assert "stage-a-test-1-gpu-amd" not in result.stderr
    assert result.returncode == 1  # the other suite is still unregistered


def test_suite_without_fix_is_a_usage_error(cli, make_repo):
    result = cli(["lint-ci", "--root", str(make_repo()), "--suite", "x"])
    assert result.returncode == 2
    assert "--suite limits --fix" in result.stderr


SGLANG_LIKE = (
    "suite-env-step",
    "other-runner-script",
    "unknown-suite",
    "undispatched-suite",
    "nightly-unlisted",
    "new-backend",
    "timeout-exceeded",
    "cadence-mismatch",
)


def test_after_fix_every_remaining_finding_says_it_needs_a_human(cli, tmp_path):
    root = materialize(None, tmp_path / "repo")
    for overlay in SGLANG_LIKE:
        shutil.copytree(FIXTURES / overlay, root, dirs_exist_ok=True)
    result = cli(["lint-ci", "--root", str(root), "--fix", "--format", "json"])
    findings = json.loads(result.stdout)["findings"]
    assert {f["code"] for f in findings} == {
        "suite-not-allowlisted",
        "timeout-exceeded",
        "cadence-mismatch",
    }
    assert all(f["fix"].startswith("needs a human") for f in findings)
    again = cli(["lint-ci", "--root", str(root), "--format", "json"])
    assert json.loads(again.stdout)["findings"] == findings

"""`lint-ci --fix` round trips: the minimal edit, comments kept, a second run changes nothing."""

from __future__ import annotations

import difflib

import pytest


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
    "unknown-suite": {
        "test/run_suite.py": [
            '-        "extra-b-test-8-gpu-h200"',
            '+        "extra-b-test-8-gpu-h200",',
            '+        "extra-c-test-4-gpu-b200",',
        ],
        ".github/workflows/pr-test-extra.yml": [
            "+          - { stage: extra-c, runner_config: 4-gpu-b200, timeout_per_file: '1800' }"
        ],
    },
    "undispatched-suite": {
        ".github/workflows/pr-test-extra.yml": [
            "+          - { stage: extra-b, runner_config: 4-gpu-b200, timeout_per_file: '' }"
        ],
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


@pytest.mark.parametrize("overlay", ["new-backend", "unknown-runner"])
def test_a_partial_fix_is_also_stable(cli, make_repo, snapshot, overlay):
    root = make_repo(overlay)
    fix(cli, root)
    once = snapshot(root)
    second = fix(cli, root)
    assert snapshot(root) == once
    assert not any(line.startswith("fixed:") for line in second.stderr.splitlines())


def test_fix_keeps_comments_and_layout(cli, make_repo, snapshot):
    root = make_repo("unknown-suite")
    before = snapshot(root)
    fix(cli, root)
    after = snapshot(root)
    for path in ("test/run_suite.py", ".github/workflows/pr-test-extra.yml"):
        old, new = before[path].decode(), after[path].decode()
        assert [line for line in old.splitlines() if "#" in line] == [
            line for line in new.splitlines() if "#" in line
        ]
    assert b"# B200 fleet" in after[".github/workflows/pr-test-extra.yml"]


def test_fix_adds_a_missing_backend_key_and_reports_what_it_cannot_fix(cli, make_repo, snapshot):
    root = make_repo("new-backend")
    before = snapshot(root)
    result = fix(cli, root)
    assert changed_lines(before, snapshot(root)) == {
        "test/run_suite.py": ['+    HWBackend.AMD: ["stage-a-test-1-gpu-amd"],']
    }
    # No workflow runs AMD suites: that needs a person, so the finding stays and gates.
    assert result.returncode == 1
    assert "suite-not-dispatched" in result.stdout
    assert (
        "not fixed: no workflow matrix runs suites like 'stage-a-test-1-gpu-amd'" in result.stderr
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

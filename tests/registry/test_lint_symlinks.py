"""lint-ci reads nothing outside --root: a symlink that resolves outside it is a finding
naming the path, and what it points to is never opened (issue 21: it read /etc/passwd)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kl_bitexact.cli import main as kl_bitexact_main

# Text that would be echoed if the file were read: Python parses it (a syntax error names
# the line), YAML too, and a scan of registrations quotes arguments.
SECRET = "TOP-SECRET-7f3a = register_cuda_ci(est_time=\n  not: [valid, yaml\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text(SECRET, encoding="utf-8")
    return path


def lint(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict], str]:
    code = kl_bitexact_main(["lint-ci", "--root", str(root), "--format", "json"])
    out, err = capsys.readouterr()
    assert "TOP-SECRET" not in out + err
    findings = json.loads(out)["findings"] if out.strip() else []
    return code, findings, err


def outside(findings: list[dict]) -> set[str]:
    return {f["file"] for f in findings if f["code"] == "outside-root"}


@pytest.mark.parametrize(
    "link",
    [
        "test/registered/kl/test_link.py",  # a registered test file
        "test/bitexact/linked.yaml",  # a kl-bitexact suite file
        ".github/workflows/linked.yml",  # a workflow
        "test/run_suite.py",  # sglang's allowlist, a single configured file
        "scripts/ci/runner_configs.yml",  # the runner table
    ],
)
def test_a_symlink_to_a_file_outside_the_root_is_a_finding_and_never_read(
    make_repo, secret, capsys, link
):
    root = make_repo()
    (root / link).unlink(missing_ok=True)
    os.symlink(secret, root / link)
    code, findings, _ = lint(root, capsys)
    assert outside(findings) == {link}
    [finding] = [f for f in findings if f["code"] == "outside-root"]
    assert finding["severity"] == "error" and "outside the repository root" in finding["message"]
    assert code == 1


def test_a_symlinked_directory_outside_the_root_is_named_not_walked(
    make_repo, secret, tmp_path, capsys
):
    root = make_repo()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "test_secret.py").write_text(SECRET, encoding="utf-8")
    os.symlink(elsewhere, root / "test" / "bitexact-linked")
    # A glob whose literal prefix is the symlinked directory would scandir through it.
    (root / ".kl-bitexact.yaml").write_text(
        "registry:\n  registered: [test/registered/**/*.py, test/bitexact-linked/*.py]\n"
    )
    code, findings, _ = lint(root, capsys)
    assert outside(findings) == {"test/bitexact-linked"}
    assert code == 1


def test_a_symlink_inside_the_root_is_read_as_usual(make_repo, capsys):
    root = make_repo()
    kl = root / "test" / "registered" / "kl"
    target = kl / "test_decode_cache_hit.py"
    (root / "shared").mkdir()
    target.rename(root / "shared" / "test_decode_cache_hit.py")
    os.symlink(Path("..", "..", "..", "shared", "test_decode_cache_hit.py"), target)
    code, findings, _ = lint(root, capsys)
    assert (code, findings) == (0, [])


def test_a_config_file_symlinked_outside_is_refused_before_parsing(make_repo, secret, capsys):
    root = make_repo()
    os.symlink(secret, root / ".kl-bitexact.yaml")
    code, _, err = lint(root, capsys)
    assert code == 2
    assert ".kl-bitexact.yaml: resolves outside the repository root" in err

"""The README's picture is a real pull request's comment (scripts/readme_media.py): the head
commit differs from the base in the engine's code only, both sides run the same suite file
and server command line, and each results.json records the commit it ran."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from kl_bitexact.results import io
from kl_bitexact.suite.load import load_bundled, parse

ROOT = Path(__file__).resolve().parents[1]


def readme_media() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_media", ROOT / "scripts/readme_media.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(checkout: Path, *argv: str) -> str:
    done = subprocess.run(["git", "-C", str(checkout), *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_pull_request_changes_code_only_and_its_commits_are_the_same_every_time(
    tmp_path: Path,
) -> None:
    media = readme_media()
    base, head = media.engine_repository(tmp_path / "one")
    again_base, again_head = media.engine_repository(tmp_path / "two")
    assert git(base, "rev-parse", "HEAD") == git(again_base, "rev-parse", "HEAD")
    assert git(head, "rev-parse", "HEAD") == git(again_head, "rev-parse", "HEAD")
    assert git(head, "rev-parse", "HEAD~1") == git(base, "rev-parse", "HEAD")
    assert git(head, "diff", "--name-only", "HEAD~1", "HEAD") == "faults.txt"
    assert media.FAULT in (head / "faults.txt").read_text()
    assert media.FAULT not in (base / "faults.txt").read_text()


def test_the_suite_file_is_the_bundled_one_launched_by_the_repository() -> None:
    media = readme_media()
    text = media.suite_file()
    bundled = load_bundled()
    ours = parse(text, source="bitexact.yaml")
    assert [s.name for s in ours] == [s.name for s in bundled]
    for mine, theirs in zip(ours, bundled, strict=True):
        assert mine.tests == theirs.tests
        # The bundled command is this interpreter, -m kl_bitexact serve-reference, then flags.
        flags = theirs.server.command[theirs.server.command.index("--port") :]
        assert mine.server.command == ("python3", "serve.py", *flags)


def test_each_side_records_its_commit_and_the_same_server_arguments(tmp_path: Path) -> None:
    # One test of the suite on each side (the regression's), as the picture's runs do.
    media = readme_media()
    base, head = media.engine_repository(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env = {k: v for k, v in env.items() if not k.startswith("GITHUB_")}
    select = ["--select", "reference-radix::multiturn"]
    for checkout, expect in ((base, 0), (head, 1)):
        done = subprocess.run(
            [sys.executable, "-m", "kl_bitexact", "run", media.SUITE_FILE, *select],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == expect, done.stdout[-2000:] + done.stderr[-2000:]
    ran = {c: io.load(c / "kl-bitexact-results" / "results.json") for c in (base, head)}
    for checkout, results in ran.items():
        assert results.run.commit == git(checkout, "rev-parse", "HEAD")
    assert ran[base].suites[0].server.args == ran[head].suites[0].server.args
    assert "--fault" not in ran[head].suites[0].server.args

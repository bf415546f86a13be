"""The README's quick start, run as a new user runs it: its first command, verbatim, in a
fresh copy of the repository (a new virtual environment, a real install, a full run).

The commands are read out of README.md, so editing the README changes what is tested.
About 30-40 s: pip installs from its cache or the configured index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Left out of the copy: what a fresh checkout does not have.
NOT_IN_A_CHECKOUT = (".git", ".venv", "kl-bitexact-results", "*.egg-info", "__pycache__", ".*cache")


def quick_start_commands() -> list[str]:
    """The lines of the first ```bash block under "## Quick start", comments kept (bash
    ignores them; they are part of what a user pastes)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```bash\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert block, "README.md: no ```bash block under ## Quick start"
    return [line for line in block[1].splitlines() if line.strip()]


def fresh_checkout(target: Path) -> Path:
    """The tracked and new (not ignored) files, as a clone of this tree would have them."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:  # not a git checkout (an unpacked tarball): copy the tree
        shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(*NOT_IN_A_CHECKOUT))
        return target
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def user_environment() -> dict[str, str]:
    """This environment minus what would make the copy use this tree's installation."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:  # the venv's bin first on PATH is harmless, but a user would not have it
        env["PATH"] = os.pathsep.join(
            part for part in env["PATH"].split(os.pathsep) if part != f"{venv}/bin"
        )
    return env


def test_the_first_command_installs_and_runs_the_bundled_suite(tmp_path: Path) -> None:
    first = quick_start_commands()[0]
    checkout = fresh_checkout(tmp_path / "kl-bitexact")
    done = subprocess.run(
        ["bash", "-c", first],
        cwd=checkout,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{first}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    results = json.loads((checkout / "kl-bitexact-results" / "results.json").read_text())
    statuses = [test["status"] for suite in results["suites"] for test in suite["tests"]]
    assert len(statuses) == 8 and set(statuses) == {"passed"}
    # The run's tally: every test of the bundled suite passed.
    assert re.search(r"^8 ok$", done.stdout, flags=re.MULTILINE), done.stdout[-2000:]
    # It warns about nothing (issue 37): a newcomer cannot tell whether to act on it. (What
    # comes before the run and on stderr is pip's.)
    ran = done.stdout.split("suite reference-radix: starting", 1)[-1]
    assert "warning" not in ran.lower(), ran
    assert not [line for line in done.stderr.splitlines() if line.startswith("kl-bitexact")]
    assert (checkout / ".venv" / "bin" / "kl-bitexact").is_file()  # installed, not borrowed


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line for line in script.splitlines() if line and not line.startswith("#")]
    second = quick_start_commands()[1].split("#", 1)[0].strip()
    assert commands[-1] == second


def readme_fault_demo() -> list[str]:
    """The README's second captured run: `$ kl-bitexact run --fault NAME` as typed there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [line] = re.findall(r"^\$ (kl-bitexact run --fault .*)$", readme, flags=re.MULTILINE)
    return line.split()


def test_the_readme_fault_demo_is_one_command_that_goes_red(tmp_path: Path) -> None:
    # It ran a suite file that is not in the repository (issue 27).
    words = readme_fault_demo()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *words[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^1 failing \(no base result\), 7 ok$", done.stdout, flags=re.MULTILINE), (
        done.stdout
    )
    line = "  failing (no base result)  reference-radix::multiturn: first divergence"
    assert line in done.stdout

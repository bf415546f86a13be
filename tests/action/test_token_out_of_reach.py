"""Issue 14, case 7: no token or action input within reach of the PR's code.

A suite's server is the PR's code. It could read `/proc/<pid>/environ` of every ancestor
it shares a user with: the `kl-bitexact run` that launched it, the `kl-bitexact action`
above that, the shell action.yml starts. Scrubbing a child's environment left the
ancestors' intact (a job-level `env: GITHUB_TOKEN` was enough), so each of them now starts
over with a clean environment (exec) before any suite process exists. Real processes: the
server is a spy that records every ancestor's environment, then becomes the stdlib fake
sglang server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "helpers" / "fake_sglang_server.py"
SECRETS = {
    "GITHUB_TOKEN": "ghs_jobLevelTokenThePrMustNeverSee",
    "GH_TOKEN": "ghp_personalTokenThePrMustNeverSee",
    "ACTIONS_RUNTIME_TOKEN": "runtimeTokenThePrMustNeverSee",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidcRequestTokenThePrMustNeverSee",
}

# Walks from itself up to the test process, recording each process's environment and
# command line, then execs the fake server (the PR's code, as far as kl-bitexact knows).
SPY = """\
import json, os, sys
stop, dump, rest = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
seen, pid = [], os.getpid()
while pid > 1 and pid != stop:
    def read(name):
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    seen.append({"pid": pid, "cmdline": read("cmdline").split("\\0"),
                 "environ": [v for v in read("environ").split("\\0") if v]})
    pid = int(read("stat").rsplit(")", 1)[1].split()[1])
with open(dump, "w") as out:
    json.dump(seen, out)
os.execv(sys.executable, [sys.executable, *rest])
"""


def _suite(tmp_path: Path) -> tuple[Path, Path]:
    spy, dump = tmp_path / "spy.py", tmp_path / "ancestors.json"
    spy.write_text(SPY)
    command = [sys.executable, str(spy), str(os.getpid()), str(dump), str(FAKE), "--port", "{port}"]
    suite = {
        "name": "spied",
        "server": {"engine": "sglang", "command": command, "startup_timeout": 20},
        "tests": [
            {
                "name": "match",
                "check": "match",
                "samples": 2,
                "prompt_tokens": [12, 20],
                "max_new_tokens": 4,
                "vocab_size": 500,
            }
        ],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump([suite]))
    return path, dump


def _leaks(dump: Path) -> list[str]:
    """Every secret value or INPUT_* variable any ancestor of the server holds."""
    ancestors: list[dict[str, Any]] = json.loads(dump.read_text())
    found = []
    for process in ancestors:
        for entry in process["environ"]:
            name = entry.split("=", 1)[0]
            secret = any(value in entry for value in SECRETS.values())
            if secret or name.startswith("INPUT_"):
                found.append(f"{' '.join(process['cmdline'])[:80]}: {name}")
    return found


def _cmdlines(dump: Path) -> list[str]:
    return [" ".join(process["cmdline"]) for process in json.loads(dump.read_text())]


def test_run_started_with_tokens_in_its_environment_leaves_none_to_its_servers(tmp_path):
    suite, dump = _suite(tmp_path)
    env = {**os.environ, **SECRETS, "GITHUB_ACTIONS": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "run", str(suite), "--out", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(" run " in line for line in _cmdlines(dump))  # the walk passed through run
    assert _leaks(dump) == []
    # Said where it matters: the rest of the job still holds them.
    assert "::warning title=kl-bitexact::" in done.stdout
    assert all(name in done.stdout for name in SECRETS), done.stdout


def _action_run_line() -> str:
    """The `run:` of action.yml's main step, exactly as the runner would execute it."""
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    [main] = [step for step in steps if step.get("id") == "main"]
    return str(main["run"])


def test_the_action_running_a_suite_leaves_no_token_or_input_to_its_servers(tmp_path):
    suite, dump = _suite(tmp_path)
    script = tmp_path / "step.sh"
    script.write_text(_action_run_line() + "\n")
    outputs = tmp_path / "github_output"
    env = {
        **os.environ,
        **SECRETS,
        # What action.yml's `env:` gives the step for `command: run` (no token input).
        "INPUT_COMMAND": "run",
        "INPUT_SUITES": str(suite),
        "INPUT_RESULTS_DIR": str(tmp_path / "out"),
        "INPUT_GITHUB_TOKEN": "",
        "INPUT_ARGS": "",
        "KL_BITEXACT_VENV": str(Path(sys.executable).parent.parent),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_ACTIONS": "true",
    }
    # As the runner runs a `shell: bash` step: the script in a file.
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _cmdlines(dump)
    # The walk passed through the action's step and its `run` child (given a values file).
    assert any(" action" in line for line in lines)
    assert any(" --values " in line and line.rstrip().endswith("/run.json") for line in lines), (
        lines
    )
    assert _leaks(dump) == []
    assert "::warning title=kl-bitexact::" in done.stdout
    # The restarted action still finishes the step: outputs and summary written.
    assert "conclusion<<" in outputs.read_text() and "success" in outputs.read_text()
    assert (tmp_path / "summary.md").read_text()


# --- issue 30, item 5: the ancestors, and secrets under other names -----------------------

PAT = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # GitHub's shape, not a real token


def _from_a_shell(tmp_path: Path, command: list[str], secrets: dict[str, str], actions: bool):
    """A step's shell given `secrets` in its environment (a step's or job's `env:`) that
    starts kl-bitexact as its child (no exec): the shell stays above the suite, holding
    them in the environment it was started with, /proc/<pid>/environ."""
    script = tmp_path / "step.sh"
    script.write_text(" ".join(command) + "\necho shell-done\n")
    env = {**os.environ, **secrets, "GITHUB_ACTIONS": "true" if actions else "false"}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_under_actions_a_token_in_the_steps_shell_stops_run_before_anything_starts(tmp_path):
    # The step's shell kept GITHUB_TOKEN after run's clean restart, and the server read it
    # from /proc/<ppid>/environ while run said the suite's processes could not.
    suite, dump = _suite(tmp_path)
    secrets = {"GITHUB_TOKEN": SECRETS["GITHUB_TOKEN"], "MY_CI_GITHUB_PAT": PAT}
    command = [sys.executable, "-m", "kl_bitexact", "run", str(suite), "--out", str(tmp_path)]
    done = _from_a_shell(tmp_path, command, secrets, actions=True)
    assert done.returncode == 0 and "shell-done" in done.stdout  # the script went on
    assert not dump.exists(), "the suite started"
    error = done.stderr
    assert "kl-bitexact: error: refusing to run the suite: GITHUB_TOKEN, MY_CI_GITHUB_PAT in " in (
        error
    )
    assert "(bash), above this kl-bitexact: the suite's processes (the PR's code) can read" in error
    assert "cannot read" not in done.stdout + error
    assert not (tmp_path / "results.json").exists()


def test_pytest_refuses_too_with_the_runtime_token_above_it(tmp_path):
    test_file = tmp_path / "test_x.py"
    test_file.write_text("def test_ok():\n    assert True\n")
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(tmp_path / "o")]
    secrets = {"ACTIONS_RUNTIME_TOKEN": SECRETS["ACTIONS_RUNTIME_TOKEN"]}
    done = _from_a_shell(tmp_path, [*command, "--", str(test_file)], secrets, actions=True)
    assert "refusing to run the suite: ACTIONS_RUNTIME_TOKEN in process" in done.stderr
    assert not (tmp_path / "o" / "junit.xml").exists()


def test_outside_actions_the_warning_says_what_the_suite_can_read(tmp_path):
    # A developer's own shell running their own code: run goes on, and says so plainly.
    suite, dump = _suite(tmp_path)
    secrets = {"GH_TOKEN": SECRETS["GH_TOKEN"], "DEPLOY_SECRET": "s3cr3t"}
    command = [sys.executable, "-m", "kl_bitexact", "run", str(suite), "--out", str(tmp_path)]
    done = _from_a_shell(tmp_path, command, secrets, actions=False)
    assert dump.exists()
    warning = next(line for line in done.stderr.splitlines() if "warning" in line)
    assert "GH_TOKEN in process" in warning and "(bash), above this kl-bitexact" in warning
    assert "can read them there" in warning and "cannot read" not in warning
    # The shell's other secret reaches the suite through run itself, and is named so.
    assert "DEPLOY_SECRET reach the suite's processes" in warning


def test_a_github_token_under_any_name_is_dropped_and_named(tmp_path):
    # MY_CI_GITHUB_PAT passed on to the suite without a word; now its name (PAT) and its
    # value (ghp_...) each say it is a credential: the restart drops it, the warning names it.
    suite, dump = _suite(tmp_path)
    env = {**os.environ, "MY_CI_GITHUB_PAT": PAT, "BUILD_CACHE_KEY": PAT, "GITHUB_ACTIONS": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "run", str(suite), "--out", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    held = [entry for process in json.loads(dump.read_text()) for entry in process["environ"]]
    assert not any(PAT in entry for entry in held[: len(held)]), "a token reached the suite"
    assert "BUILD_CACHE_KEY, MY_CI_GITHUB_PAT in this step's environment" in done.stdout

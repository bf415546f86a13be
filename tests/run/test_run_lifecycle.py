"""`kl-bitexact run` as a user meets it, against real server processes: the stdlib fake
sglang server in tests/helpers/fake_sglang_server.py crashes, hangs or never gets healthy on
demand. Every case ends in a result and an exit code, never a hang or a traceback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_suites import FAKE, statuses, suite_yaml, write
from process_groups import group

from kl_bitexact.results import io as results_io
from kl_bitexact.run.runner import DEATH_GRACE_S
from kl_bitexact.run.server import Server, Teardown, free_port, launch, stop_group
from kl_bitexact.suite.model import EngineName, ServerSpec


def messages(out: Path) -> dict[str, str]:
    return {t.id: t.message for _, t in results_io.load(out / "results.json").all_tests()}


def test_a_healthy_run_writes_results_report_and_log(cli, tmp_path):
    out = tmp_path / "out"
    result = cli(["run", str(write(tmp_path, suite_yaml("good"))), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert statuses(out) == {"good::match": "passed", "good::decode_cache_hit": "passed"}
    assert re.search(r"PASSED +good::match +KL 0 +logprobs 0/\d+ differ", result.stdout)
    # The launch is announced before anything else, and when the server is up.
    lines = result.stdout.splitlines()
    assert lines[0] == f"suite good: starting the server (log: {out / 'logs' / 'good.log'})"
    assert re.fullmatch(r"suite good: server up in \d+\.\d s", lines[1])
    assert lines[2].startswith("  PASSED   good::")  # no "suite good" again: the launch said it
    report = (out / "report.md").read_text()
    assert "gate passed" in report and "<code>good::decode&#95;cache&#95;hit</code> | 0 |" in report
    assert "listening" in (out / "logs" / "good.log").read_text()


def test_identical_servers_share_one_launch(cli, tmp_path):
    out = tmp_path / "out"
    spec = suite_yaml("first")
    path = write(tmp_path, spec, spec.replace("first", "second"))
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 0
    loaded = results_io.load(out / "results.json")
    assert [s.server.launch_s for s in loaded.suites][1] == 0.0
    # The second suite has no launch of its own to introduce it: its heading does.
    assert "\nsuite second\n" in result.stdout and "suite second: starting" not in result.stdout
    assert (out / "logs" / "first.log").read_text().count("listening on") == 1


def test_a_crash_mid_run_errors_that_test_and_the_run_goes_on(cli, tmp_path):
    out = tmp_path / "out"
    path = write(
        tmp_path,
        suite_yaml("crashy", "--crash-after", "1", tests=("match", "decode_cache_hit")),
        suite_yaml("after"),
    )
    result = cli(["run", str(path), "--out", str(out)])
    assert statuses(out) == {
        "crashy::match": "error",
        "crashy::decode_cache_hit": "error",
        "after::match": "passed",
        "after::decode_cache_hit": "passed",
    }
    text = messages(out)["crashy::match"]
    assert "server exited with code 1" in text and "listening on" in text  # the log's tail
    assert "died earlier in this suite" in messages(out)["crashy::decode_cache_hit"]
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_out_of_memory_is_called_out_as_infrastructure(cli, tmp_path):
    out = tmp_path / "out"
    path = write(tmp_path, suite_yaml("oom", "--crash-after", "1", "--oom", tests=("match",)))
    result = cli(["run", str(path), "--out", str(out)])
    assert result.returncode == 2
    assert "infrastructure: out of memory (torch.OutOfMemoryError" in messages(out)["oom::match"]


def test_a_server_slow_to_exit_after_its_connections_drop_is_still_seen_dead(tmp_path):
    # Under load a crashed server is reaped seconds after its sockets close: the run must
    # wait for the exit before it says whether the server died (and of what).
    log = tmp_path / "server.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    slow_exit = "import time; time.sleep(3); raise SystemExit(1)"
    with group([sys.executable, "-c", slow_exit]) as process:
        dying = Server(f"http://127.0.0.1:{free_port()}", process=process, log_path=log)
        report = dying.death_report(grace_s=DEATH_GRACE_S)
    assert report is not None and "server exited with code 1" in report
    assert "infrastructure: out of memory (torch.OutOfMemoryError" in report


def test_a_live_server_is_not_waited_for(tmp_path):
    command = (sys.executable, str(FAKE), "--port", "{port}")
    running = launch(ServerSpec(EngineName.SGLANG, command, startup_timeout=30), tmp_path / "s.log")
    try:
        started = time.monotonic()
        assert running.death_report(grace_s=DEATH_GRACE_S) is None
        assert time.monotonic() - started < DEATH_GRACE_S / 2
    finally:
        running.stop()


def test_a_never_healthy_server_is_an_error_after_the_startup_timeout(cli, tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    result = cli(
        ["run", str(write(tmp_path, suite_yaml("sick", "--never-healthy"))), "--out", str(out)]
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 2, result.stdout
    assert set(statuses(out).values()) == {"error"}
    assert "did not answer 200 within 3 s" in messages(out)["sick::match"]
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith(
        "kl-bitexact: exit 2, could not run: 2 tests (sick::match, sick::decode_cache_hit): http://"
    ), last


def test_a_hanging_request_times_out_as_an_error(cli, tmp_path):
    out = tmp_path / "out"
    path = write(
        tmp_path,
        suite_yaml("hang", "--hang-after", "1", timeout="2", tests=("match",)),
        suite_yaml("after", tests=("match",)),
    )
    started = time.monotonic()
    result = cli(["run", str(path), "--out", str(out)])
    assert time.monotonic() - started < 60
    assert statuses(out) == {"hang::match": "error", "after::match": "passed"}
    assert "did not answer within 2 s" in messages(out)["hang::match"]
    assert result.returncode == 2
    # The error's hint (what to do) is kept and shown under the test's line, not only the message.
    hint = "raise server.request_timeout in the suite, or look at the server log"
    [hanging] = [t for _, t in results_io.load(out / "results.json").all_tests() if t.hint]
    assert hanging.id == "hang::match" and hanging.hint == hint
    assert f"    hint: {hint}\n" in result.stdout


def test_github_actions_folds_each_suite(cli, tmp_path):
    result = cli(
        ["run", str(write(tmp_path, suite_yaml("gha"))), "--out", str(tmp_path / "o")],
        env={"GITHUB_ACTIONS": "true"},
    )
    assert result.returncode == 0
    assert (
        result.stdout.index("::group::suite gha")
        < result.stdout.index("gha::match")
        < result.stdout.index("::endgroup::")
    )


def test_select_and_exact(cli, tmp_path):
    out = tmp_path / "out"
    path = write(tmp_path, suite_yaml("sel"))
    result = cli(["run", str(path), "--out", str(out), "--select", "*::decode*", "--exact"])
    assert result.returncode == 0
    assert statuses(out) == {"sel::decode_cache_hit": "passed"}
    result = cli(["run", str(path), "--out", str(out), "--select", "nothing"])
    assert result.returncode == 2 and "--select nothing matched no test" in result.stderr
    assert "sel::match" in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: s\nserver: {engine: reference}\ntests: [{name: a, chek: match}]",
            "tests[0].chek: unknown key",
        ),
        (
            "name: s\nserver: {engine: reference}\ntests: [{name: a, check: match, samples: 0}]",
            "tests[0].samples: expected an integer >= 1",
        ),
        ("- [unclosed", "invalid YAML at line"),
    ],
)
def test_bad_suite_files_exit_2_naming_file_and_key(cli, tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = cli(["run", str(path), "--out", str(tmp_path / "o")])
    assert result.returncode == 2
    assert f"{path}: " in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_suite_file(cli, tmp_path):
    result = cli(["run", str(tmp_path / "absent.yaml")])
    assert result.returncode == 2 and "absent.yaml: cannot read suite file" in result.stderr


def test_teardown_ladder_kills_a_group_that_ignores_signals():
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    with group([sys.executable, "-c", script], stdout=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        started = time.monotonic()
        stop_group(process, Teardown(interrupt_s=0.3, terminate_s=0.3, kill_s=5))
        assert process.poll() == -signal.SIGKILL
        assert time.monotonic() - started < 5
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)


@pytest.mark.parametrize("field", ["logprob", "output_id", "cached_tokens"])
def test_a_non_numeric_answer_errors_that_test_and_the_run_goes_on(cli, tmp_path, field):
    out = tmp_path / "out"
    path = write(
        tmp_path,
        suite_yaml("odd", "--malformed", field, tests=("match",)),
        suite_yaml("after", tests=("match",)),
    )
    result = cli(["run", str(path), "--out", str(out)])
    assert "internal error" not in result.stderr, result.stderr
    assert statuses(out) == {"odd::match": "error", "after::match": "passed"}
    assert "the server's /generate" in messages(out)["odd::match"]
    assert "malformed" in messages(out)["odd::match"]
    assert result.returncode == 2


def test_a_trickling_answer_is_cut_at_the_request_timeout_in_total(cli, tmp_path):
    # One byte a second: each read is within the timeout, the whole answer is not.
    out = tmp_path / "out"
    path = write(tmp_path, suite_yaml("drip", "--trickle", timeout="3", tests=("match",)))
    started = time.monotonic()
    result = cli(["run", str(path), "--out", str(out)])
    assert time.monotonic() - started < 45, "the request ran past its total deadline"
    assert statuses(out) == {"drip::match": "error"}
    assert "did not answer within 3 s" in messages(out)["drip::match"]
    assert result.returncode == 2


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/server_info", "/server_info did not answer within 3 s"),
        ("/health", "/health did not answer 200 within 3 s (no complete answer within"),
    ],
)
def test_an_answer_dripped_headers_and_all_is_cut_at_its_deadline(cli, tmp_path, path, said):
    # Status line, headers and body at 1 byte / 0.25 s (issue 30, item 7): every read is
    # quick, so only a bound on the whole request ends it; the server's info took 35 s
    # (10 s a read) and /health 19 s against limits of 3 s.
    out = tmp_path / "out"
    spec = suite_yaml("drip", "--drip", path, timeout="3", tests=("match",))
    started = time.monotonic()
    result = cli(["run", str(write(tmp_path, spec)), "--out", str(out)])
    assert time.monotonic() - started < 15, "a request ran past its total deadline"
    assert said in next(iter(messages(out).values()))
    assert result.returncode == 2


@pytest.mark.parametrize("github", [True, False])
def test_a_servers_text_cannot_issue_workflow_commands(capsys, github):
    # A server's error answer or log line starting with `::` would be a workflow command
    # (an annotation, a mask, a group) in the run job's log.
    from kl_bitexact.commands.console import ConsoleReporter
    from kl_bitexact.results.model import Status, TestResult

    forged = "bad answer\n::error title=gate::all tests passed"
    test = TestResult(id="s::match", check="match", status=Status.ERROR, message=forged)
    ConsoleReporter(github=github).test_finished(test)
    lines = capsys.readouterr().out.splitlines()
    # Each line of a message is indented, and the runner may trim: still stop the commands.
    forged_line = "    ::error title=gate::all tests passed"
    assert forged_line in lines
    if github:
        stop, token = lines[0].split("::")[1:3]
        assert stop == "stop-commands" and len(token) == 32
        assert lines[-1] == f"::{token}::"
        assert lines.index(forged_line) < len(lines) - 1
    else:
        assert not any("stop-commands" in line for line in lines)

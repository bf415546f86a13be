"""Issue 14, case 9: files in a results directory are written and read as regular files only.

The results directory is where a run of PR code wrote, and on a self-hosted runner what it
left stays for the next job: a `comment.md` that is a symlink was written through (to any
file the later job may write), and a FIFO made a writer or a reader wait forever. Written
files replace whatever is in their place; appended files (the job summary, server logs)
and read files must be regular files, never followed through a link.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from fake_suites import suite_yaml, write
from golden_scenarios import check_result, results

from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.run import watchdog
from kl_bitexact.untrusted.jsonfile import open_append

VICTIM = "a file the job can write, which the PR must not choose the contents of\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM)
    return victim


def _head(tmp_path: Path) -> Path:
    path = tmp_path / "head.json"
    results_io.write_atomic(results(check_result("t::a")), path)
    return path


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_report_out_replaces_what_was_planted_and_writes_through_nothing(cli, tmp_path, planted):
    victim = _victim(tmp_path)
    comment = tmp_path / "results" / "comment.md"
    comment.parent.mkdir()
    if planted == "symlink":
        comment.symlink_to(victim)
    else:
        os.mkfifo(comment)  # opened for writing, it waited for a reader forever
    done = cli(["report", str(_head(tmp_path)), "--out", str(comment)], timeout=30)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM
    assert not comment.is_symlink() and comment.is_file()
    assert "gate passed" in comment.read_text()


def test_a_job_summary_that_is_a_symlink_is_refused_unwritten(cli, tmp_path):
    victim = _victim(tmp_path)
    summary = tmp_path / "summary.md"
    summary.symlink_to(victim)
    done = cli(["report", str(_head(tmp_path)), "--job-summary", str(summary)], timeout=30)
    assert done.returncode == 2, done.stderr
    assert f"{summary}: a symbolic link" in done.stderr
    assert victim.read_text() == VICTIM


def test_a_job_summary_that_is_a_fifo_is_refused_at_once(cli, tmp_path):
    summary = tmp_path / "summary.md"
    os.mkfifo(summary)
    done = cli(["report", str(_head(tmp_path)), "--job-summary", str(summary)], timeout=30)
    assert done.returncode == 2 and "not a regular file (a FIFO)" in done.stderr, done.stderr


def test_run_writes_its_report_and_logs_through_no_planted_link(cli, tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "report.md").symlink_to(victim)
    (out / "logs" / "good.log").symlink_to(victim)
    done = cli(["run", str(write(tmp_path, suite_yaml("good"))), "--out", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert victim.read_text() == VICTIM
    for written in (out / "report.md", out / "logs" / "good.log"):
        assert written.is_file() and not written.is_symlink()
    assert "gate passed" in (out / "report.md").read_text()
    assert "listening" in (out / "logs" / "good.log").read_text()


def test_a_server_log_swapped_for_a_link_gets_no_line_of_ours(tmp_path):
    # The server is the PR's code and can write the logs directory while it runs.
    victim = _victim(tmp_path)
    log = tmp_path / "server.log"
    log.symlink_to(victim)
    with pytest.raises(ConfigError, match="a symbolic link"):
        open_append(log)
    watchdog.note(str(log), "stopping the server group")
    assert victim.read_text() == VICTIM


def test_a_results_file_is_not_read_through_a_symlink(tmp_path):
    link = tmp_path / "results.json"
    link.symlink_to(_head(tmp_path))
    with pytest.raises(ConfigError, match="a symbolic link"):
        results_io.load(link)


def test_the_action_reads_no_planted_report_into_the_job_summary(tmp_path, capsys):
    from kl_bitexact.commands import action

    victim = _victim(tmp_path)
    (tmp_path / "linked.md").symlink_to(victim)
    os.mkfifo(tmp_path / "fifo.md")  # read, it waited for a writer forever
    assert action._read_text(tmp_path / "linked.md") == ""
    assert action._read_text(tmp_path / "fifo.md") == ""
    assert action._read_text(tmp_path / "missing.md") == ""
    warnings = capsys.readouterr().out.splitlines()
    assert warnings[0].endswith("linked.md: a symbolic link, not a report")
    assert warnings[1].endswith("fifo.md: not a regular file (a FIFO), so not a report")
    assert len(warnings) == 2


def test_a_device_or_a_link_to_a_stream_is_written_to_never_replaced(tmp_path):
    # Replacing is for what a run left in a results directory. `--out /dev/null` replaced
    # the machine's /dev/null (run as root) with a regular file: a stream is written to.
    from kl_bitexact.untrusted.jsonfile import replace_text

    stdout_like = tmp_path / "stdout"
    stdout_like.symlink_to("/dev/null")
    replace_text(stdout_like, "text")
    assert stdout_like.is_symlink() and Path("/dev/null").is_char_device()
    if os.geteuid() == 0:  # only root may make a device node
        node = tmp_path / "null"
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        replace_text(node, "text")
        assert node.is_char_device()
    socket_path = tmp_path / "socket"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(socket_path))
        with pytest.raises(ConfigError, match="not a regular file \\(a socket\\)"):
            replace_text(socket_path, "text")

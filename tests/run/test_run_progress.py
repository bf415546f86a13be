"""What `run` says while it waits (issue 20): a server starting prints a line every
PROGRESS_INTERVAL_S with the time so far and its log's last line; a URL that does not
answer says why, and is not waited for again by the next suite. Real processes (the fake
sglang server), with the interval shrunk so the test takes seconds."""

from __future__ import annotations

import re
import sys
import time

from fake_suites import FAKE, TEST

from kl_bitexact.run import server
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite.load import parse
from kl_bitexact.suite.model import EngineName, ServerSpec


class Recording:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failures: list[tuple[str, str]] = []

    def suite_started(self, item): ...

    def test_finished(self, result): ...

    def suite_finished(self, result): ...

    def progress(self, line: str) -> None:
        self.lines.append(line)

    def server_failed(self, item, error) -> None:
        self.failures.append((item.name, error.message))


def test_a_slow_start_reports_elapsed_time_and_the_log_s_last_line(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "PROGRESS_INTERVAL_S", 0.5)
    command = (sys.executable, str(FAKE), "--port", "{port}", "--slow-start", "2.5")
    lines: list[str] = []
    log = tmp_path / "slow.log"
    running = server.launch(
        ServerSpec(EngineName.SGLANG, command, startup_timeout=30),
        log,
        label="suite slow",
        progress=lines.append,
    )
    running.stop()
    assert lines[0] == f"suite slow: starting the server (log: {log})"
    assert re.fullmatch(r"suite slow: server up in \d+\.\d s", lines[-1])
    waiting = lines[1:-1]
    assert len(waiting) >= 3, lines
    said = [re.match(r"suite slow: (\d+) s of at most 30 s, ", w) for w in waiting]
    assert all(said), waiting
    seconds = [int(m.group(1)) for m in said if m]
    assert seconds == sorted(seconds)
    # The progress bar's latest state: its colour codes and carriage returns gone.
    assert re.fullmatch(
        r"suite slow: \d+ s of at most 30 s, server starting; its log's last line: "
        r"fake sglang loading weights \d+%",
        waiting[-1],
    ), waiting[-1]
    assert all("\x1b" not in w and "\r" not in w for w in waiting)


def test_an_unreachable_url_says_why_and_is_not_waited_for_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "PROGRESS_INTERVAL_S", 0.5)
    monkeypatch.setattr(server, "ATTACH_TIMEOUT_S", 2.0)
    url = f"http://127.0.0.1:{server.free_port()}"  # nobody listens there
    text = "".join(
        f"- name: {name}\n  server: {{engine: sglang, base_url: '{url}'}}\n"
        f"  tests: [{TEST % ('match', 'match')}]\n"
        for name in ("first", "second")
    )
    suites = tuple(parse(text, source="suites.yaml"))
    reporter = Recording()
    started = time.monotonic()
    final = run_suites(Plan(suites, tmp_path / "logs"), reporter, lambda partial: None)
    assert time.monotonic() - started < 2 * server.ATTACH_TIMEOUT_S  # the second did not wait
    assert reporter.lines and all(
        line.startswith("suite first: ") and line.endswith(f"{url}/health: Connection refused")
        for line in reporter.lines
    ), reporter.lines
    first, second = (test for _, test in final.all_tests())
    # A refused connection is not a slow start: no startup_timeout, no server log to read.
    assert first.message == f"{url} refused connections for 2 s: no server listens there"
    assert first.hint.startswith("start the server first, or fix the host and port")
    assert "startup_timeout" not in first.hint and "log" not in first.hint.split(";")[0]
    # The URL is at fault, not the suite: the same words for every suite that uses it, told
    # once per suite (the terminal folds the repeats).
    assert (second.message, second.hint) == (first.message, first.hint)
    assert reporter.failures == [("first", first.message), ("second", first.message)]

"""What `run` prints at a terminal (issue 27): colour (--color, NO_COLOR), lines within
the terminal's width, a heartbeat while a test runs; in a log, whole lines and no colour."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import process_groups
import pytest

from kl_bitexact.commands import console
from kl_bitexact.commands.console import ConsoleReporter, Style, progress_line, wants_colour
from kl_bitexact.results.model import CacheHits, ExactMatch, Status, TestResult
from kl_bitexact.suite.model import CheckName, EngineName, ServerSpec, Suite, TestSpec

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("choice", "tty", "env", "colour"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),  # a pipe, a file, a CI log
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        ("auto", True, {"TERM": "dumb"}, False),
        ("always", False, {"NO_COLOR": "1"}, True),  # asked for by name
        ("never", True, {}, False),
    ],
)
def test_colour_is_for_terminals_unless_told(choice, tty, env, colour):
    stream = Terminal() if tty else io.StringIO()
    assert wants_colour(choice, stream, env) is colour


def _result(**fields: object) -> TestResult:
    values: dict[str, object] = {
        "id": "reference-speculative::decode_cache_hit",
        "check": "decode_cache_hit",
        "status": Status.PASSED,
        "kl_div": 0.0,
        "exact": ExactMatch(tokens=336, mismatched=0),
        "cache_hits": CacheHits(hit=14, total=16, min_ratio=0.5, expected=16),
        "duration_s": 2.6,
    }
    values.update(fields)
    return TestResult(**values)  # type: ignore[arg-type]


def test_a_result_line_fits_the_width_by_dropping_details_before_cutting():
    full = progress_line(_result())
    assert full == (
        "  PASSED   reference-speculative::decode_cache_hit  KL 0  logprobs 0/336 differ  "
        "hits 14/16 (up to 16 predicted, pass >=9)  2.6s"
    )
    assert len(full) > 100  # it wrapped at 100 columns
    fitted = progress_line(_result(), name_width=45, width=100)
    assert fitted.endswith("hits 14/16  2.6s") and len(fitted) <= 100
    assert len(progress_line(_result(), width=60)) == 60
    # All hits as expected: no parenthesis to read.
    assert progress_line(_result(cache_hits=CacheHits(8, 8, 0.99, 8))).endswith("hits 8/8  2.6s")


def test_long_messages_wrap_under_their_label_within_the_width():
    stream = io.StringIO()
    reporter = ConsoleReporter(github=False, style=Style(width=60), stream=stream)
    warning = "cache budget: reusing every sample needs about 1600 tokens " * 3
    reporter.test_finished(_result(status=Status.FAILED, message="avg KL", warnings=(warning,)))
    lines = stream.getvalue().splitlines()
    assert all(len(line) <= 60 for line in lines), lines
    assert lines[2].startswith("    warning: cache budget") and lines[3].startswith(" " * 13)


def test_a_warning_every_test_of_a_suite_carries_is_printed_once_per_suite():
    # Issue 37: a server's warning stood under each of six tests.
    stream = io.StringIO()
    reporter = ConsoleReporter(github=False, stream=stream)
    specs = tuple(TestSpec(name=n, check=CheckName.MATCH) for n in "ab")
    for name in ("s", "t"):
        reporter.suite_started(Suite(name, f"{name}.yaml", ServerSpec(EngineName.SGLANG), specs))
        for n in "ab":
            reporter.test_finished(_result(id=f"{name}::{n}", warnings=("server says hi",)))
    assert stream.getvalue().count("warning: server says hi") == 2  # once in each suite


def test_colour_marks_the_status_and_the_labels():
    stream = io.StringIO()
    reporter = ConsoleReporter(github=False, style=Style(colour=True), stream=stream)
    reporter.test_finished(_result(status=Status.FAILED, message="m", hint="h"))
    text = stream.getvalue()
    assert "\x1b[1;31mFAILED\x1b[0m" in text and "\x1b[36mhint:\x1b[0m h" in text


def test_a_heartbeat_names_the_running_test_its_seconds_and_the_answers(monkeypatch):
    monkeypatch.setattr(console, "LOG_BEAT_S", 0.2)
    stream = io.StringIO()
    reporter = ConsoleReporter(github=False, stream=stream)
    spec = TestSpec(name="slow", check=CheckName.MATCH)
    suite = Suite("s", "s.yaml", ServerSpec(EngineName.SGLANG), (spec,))
    reporter.suite_started(suite)
    reporter.tally.add(8)
    time.sleep(0.7)
    reporter.test_finished(_result(id="s::slow"))
    beats = [line for line in stream.getvalue().splitlines() if line.startswith("  ...")]
    assert beats and re.fullmatch(r"  \.\.\.      s::slow: \d s, 8 sequences answered", beats[0])
    time.sleep(0.5)  # nothing runs: no more beats
    assert stream.getvalue().splitlines()[-1].startswith("  PASSED")


def test_at_a_100_column_terminal_a_failing_run_is_coloured_and_fits(tmp_path: Path):
    """The real thing, in a pseudo-terminal 100 columns wide (the screenshot's setup)."""
    import fcntl
    import struct
    import termios

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 100, 0, 0))
    env = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "GITHUB_ACTIONS")
    }
    argv = [
        sys.executable,
        "-m",
        "kl_bitexact",
        "run",
        "--fault",
        "branch-checkpoint-reuse",
        "--select",
        "reference-radix",
        "--select",
        "reference-speculative",
    ]
    with process_groups.group(
        argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    ) as run:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = run.wait(timeout=120)
    os.close(leader)
    text = b"".join(chunks).decode()
    assert code == 1, text
    assert "\x1b[1;31mFAILED\x1b[0m" in text and "\x1b[32mPASSED\x1b[0m" in text
    assert "\x1b[1;31mfailing (no base result)\x1b[0m" in text  # the state, as its status
    # What stays on screen: the heartbeat's redraws erased, colour codes not counted.
    shown = [
        ANSI.sub("", line.rsplit("\r", 1)[-1]) for line in text.replace("\r\n", "\n").split("\n")
    ]
    assert [line for line in shown if len(line) > 100] == [], shown
    assert "1 failing (no base result), 5 ok" in shown


def test_a_terminal_that_reports_no_width_is_read_as_no_limit():
    """act runs steps on a pseudo-terminal nobody sized: 0 columns. Wrapping at 0 raised
    ValueError in textwrap (act's runs of the action failed); such a terminal is unlimited."""
    import pty

    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as stream:
            assert os.get_terminal_size(follower).columns == 0  # the case itself
            assert console.line_width(stream, {}) is None
            assert console.line_width(stream, {"COLUMNS": "120"}) == 120
    finally:
        os.close(leader)
        os.close(follower)

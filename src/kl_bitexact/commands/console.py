"""What `run` prints while it runs: for a person at a terminal, and for a CI log.

At a terminal (issue 27): the status words in colour (`--color auto|always|never`;
`auto` is a terminal without NO_COLOR), every line within the terminal's width (result
lines of 101-105 characters wrapped at 100 columns; `COLUMNS` sets the width anywhere, so
a captured run can be laid out too), and a heartbeat while a test runs - its name, the
seconds so far and the sequences the server has answered - redrawn in place every second
(in a log: a line every 30 s). Without a terminal and without COLUMNS, lines stay whole
(one line per message: what a log search wants).
"""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from kl_bitexact.errors import ServerError
from kl_bitexact.results.formats import fmt_kl, hits_short
from kl_bitexact.results.model import Status, SuiteResult, TestResult
from kl_bitexact.run.engines.base import Engine, Generation, Replay, SamplingParams, TokenIds
from kl_bitexact.suite.model import Suite
from kl_bitexact.untrusted import escape

COLOR_CHOICES = ("auto", "always", "never")
# A server's line, or our message quoting it: long enough for any reason.
MAX_LINE = 400
# Seconds between heartbeats: redrawn in place at a terminal, a new line in a log.
LIVE_BEAT_S = 1.0
LOG_BEAT_S = 30.0

_RESET = "\x1b[0m"
_STATUS_COLOUR = {
    Status.PASSED: "32",  # green
    Status.FAILED: "1;31",  # bold red
    Status.ERROR: "1;35",  # bold magenta: not the change's red, the run's
    Status.FLAKY: "1;33",  # bold yellow
    Status.SKIPPED: "33",
    Status.NOT_RUN: "33",
    Status.NOT_EXERCISED: "1;33",  # bold yellow: red, but not the numbers' red
}
_WORD_COLOUR = {"warning:": "33", "hint:": "36", "heading": "1", "dim": "2"}


def wants_colour(choice: str, stream: TextIO, env: Mapping[str, str]) -> bool:
    """`always` and `never` as said; `auto`: a terminal, NO_COLOR unset or empty
    (no-color.org), and not TERM=dumb."""
    if choice != "auto":
        return choice == "always"
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def line_width(stream: TextIO, env: Mapping[str, str]) -> int | None:
    """COLUMNS when set, else the terminal's width, else None (a pipe or a file: no limit).
    A terminal that reports no width (0 columns: act's, a container's pseudo-terminal before
    it is sized) is one with no limit, as a pipe is."""
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 40:
        return int(columns)
    if not _isatty(stream):
        return None
    try:
        columns_of_terminal = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return None
    return columns_of_terminal or None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Style:
    """Colour or not, and the width lines are laid out in (None: as long as they are)."""

    colour: bool = False
    width: int | None = None

    def paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}{_RESET}" if self.colour and text else text

    def status(self, status: Status, text: str) -> str:
        return self.paint(text, _STATUS_COLOUR.get(status, "0"))

    def word(self, kind: str, text: str) -> str:
        return self.paint(text, _WORD_COLOUR[kind])

    def wrap(self, text: str, indent: str = "", hanging: str | None = None) -> list[str]:
        """`text` (plain) as lines of at most `width`, continued under `hanging`."""
        if self.width is None:
            return [indent + text]
        rest = indent + "  " if hanging is None else hanging
        lines = textwrap.wrap(
            text,
            self.width,
            initial_indent=indent,
            subsequent_indent=rest,
            break_on_hyphens=False,
        )
        return lines or [indent]

    def fit(self, line: str) -> str:
        """One line cut to `width` (a result line's columns: a cut is better than a wrap)."""
        if self.width is None or len(line) <= self.width:
            return line
        return line[: self.width - 1] + "\u2026"


def progress_line(result: TestResult, name_width: int = 0, width: int | None = None) -> str:
    """`  PASSED   suite::test  KL 0  logprobs 0/192 differ  hits 8/8  0.4s`: the numbers
    that decide the verdict, after the ids of a suite padded to one width. Hits name what
    was expected only when it was not all. Within `width`, the padding goes first, then
    what was expected; a line is cut only when even that does not fit."""
    exact = f"{result.exact.mismatched}/{result.exact.tokens} differ" if result.exact else "-"
    if result.exact and result.exact.not_reported:
        exact += f" ({result.exact.not_reported} not reported)"
    hits = short_hits = "-"
    if result.cache_hits is not None:
        h = result.cache_hits
        hits = short_hits = f"{h.hit}/{h.total}"
        if h.expected is None or h.expected != h.total or h.hit < h.total:
            hits = hits_short(h)
    status, kl, seconds = result.status.value.upper(), fmt_kl(result.kl_div), result.duration_s
    variants = [
        f"  {status:8} {result.id:<{name_width}}  KL {kl}  logprobs {exact}  "
        f"hits {hits}  {seconds:.1f}s",
        f"  {status:8} {result.id}  KL {kl}  logprobs {exact}  hits {hits}  {seconds:.1f}s",
        f"  {status:8} {result.id}  KL {kl}  logprobs {exact}  hits {short_hits}  {seconds:.1f}s",
    ]
    fitting = [line for line in variants if width is None or len(line) <= width]
    return fitting[0] if fitting else Style(width=width).fit(variants[-1])


def first_line(text: str) -> str:
    return escape.terminal(text.strip().splitlines()[0] if text.strip() else "", MAX_LINE)


class Tally:
    """Sequences the servers have answered so far (the heartbeat's 'samples done')."""

    def __init__(self) -> None:
        self.answered = 0

    def add(self, count: int) -> None:
        self.answered += count  # one writer (the run's thread); the heartbeat only reads


class CountingEngine:
    """An engine adapter that counts the sequences its server answered, for the heartbeat
    (everything else goes to the adapter it wraps)."""

    def __init__(self, inner: Engine, tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    def server_info(self) -> Mapping[str, Any]:
        return self.inner.server_info()

    def flush(self) -> None:
        self.inner.flush()

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        answers = self.inner.generate(prompts, params)
        self.tally.add(len(answers))
        return answers

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        answers = self.inner.replay(sequences, last=last)
        self.tally.add(len(answers))
        return answers

    def __getattr__(self, name: str) -> Any:  # what an adapter offers beyond the protocol
        return getattr(self.inner, name)


def counting(connect: Callable[..., Engine], tally: Tally) -> Callable[..., Engine]:
    def connected(*args: Any, **kwargs: Any) -> Engine:
        return CountingEngine(connect(*args, **kwargs), tally)

    return connected


@dataclass
class _Running:
    """The test the heartbeat speaks of: inferred from the suite's order (the runner says
    when a suite starts and a test ends; the next one in the suite starts then)."""

    name: str
    started: float
    answered_before: int


@dataclass
class ConsoleReporter:
    """One line per finished test; each suite folded in a group under GitHub Actions.
    `quiet`: nothing at all (`run --quiet`)."""

    github: bool
    quiet: bool = False
    style: Style = field(default_factory=Style)
    live: bool = False  # a terminal: the heartbeat redraws one line in place
    tally: Tally = field(default_factory=Tally)
    stream: TextIO | None = None  # None: sys.stdout at the time of printing
    _last_progress: str = ""  # since the last suite ended
    _server_down: str = ""  # the suite whose server failed, its tests told in short
    _told: set[tuple[str, str]] = field(default_factory=set)  # server failures printed
    _queue: list[str] = field(default_factory=list)  # the suite's tests yet to finish
    _name_width: int = 0
    _running: _Running | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _beat: threading.Thread | None = None
    _drawn: bool = False  # a heartbeat line is on screen (live), to erase before printing
    _warned: set[str] = field(default_factory=set)  # the suite's warnings printed so far

    def say(self, line: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._erase()
            print(line, file=self.stream or sys.stdout, flush=True)

    def _say_lines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.say(line)

    # --- the runner's calls -------------------------------------------------------------

    def suite_started(self, item: Suite) -> None:
        if self.github:
            self.say(f"::group::suite {escape.command_data(item.name)}")
        elif not self._last_progress.startswith(f"suite {item.name}: "):
            heading = f"suite {item.name}"  # unless its launch lines just said so
            self.say(self.style.word("heading", self.style.fit(heading)))
        self._queue = [f"{item.name}::{test.name}" for test in item.tests]
        self._warned = set()
        self._name_width = max((len(name) for name in self._queue), default=0)
        self._next_test()

    def progress(self, line: str) -> None:
        self._last_progress = line
        self._say_lines(self.style.wrap(line))

    def server_failed(self, item: Suite, error: ServerError) -> None:
        """Once per server, not once per test (a typo in a server argument printed its
        usage text once per test, 86 lines): the message with the log's tail, the hint;
        the same failure again (an unreachable URL, suite after suite) in one line."""
        self._running = None
        self._server_down = item.name
        if (error.message, error.hint or "") in self._told:
            self._say_lines(self.style.wrap(f"not tried again: {first_line(error.message)}", "  "))
            return
        self._told.add((error.message, error.hint or ""))
        first, *rest = error.message.splitlines() or [""]
        lines = self.style.wrap(escape.terminal(first, MAX_LINE))
        lines += [self.style.fit(f"    | {escape.terminal(line, MAX_LINE)}") for line in rest]
        if error.hint:
            lines += self._labelled("hint:", error.hint, "  ")
        self._say_untrusted(lines)

    def test_finished(self, result: TestResult) -> None:
        self._running = None
        status = result.status.value.upper()
        if self._server_down and result.status is Status.ERROR:
            word = self.style.status(result.status, f"{status:8}")
            self.say(f"  {word} {result.id}  did not run: no server")
            self._next_test()
            return
        line = progress_line(result, self._name_width, self.style.width)
        lines = [line.replace(status, self.style.status(result.status, status), 1)]
        # A repeated test always says what its repeats showed (stable or not).
        if result.status is not Status.PASSED or result.repeats is not None:
            lines += self._message(result.message)
        if result.hint:
            lines += self._labelled("hint:", result.hint, "    ")
        # Once per suite (issue 37: a server's warning stood under each of six tests).
        for warning in result.warnings:
            if warning not in self._warned:
                lines += self._labelled("warning:", warning, "    ")
        self._warned.update(result.warnings)
        self._say_untrusted(lines)
        self._next_test()

    def suite_finished(self, result: SuiteResult) -> None:
        self._last_progress = ""
        self._queue, self._running = [], None
        down, self._server_down = self._server_down, ""
        if not self.github:
            return
        self.say("::endgroup::")
        if down and result.tests:  # one annotation for the server, not one per test
            test = result.tests[0]
            text = f"{test.message} (hint: {test.hint})" if test.hint else test.message
            title = escape.command_property(f"suite {down}: {len(result.tests)} tests did not run")
            self.say(f"::error title={title}::{escape.command_data(text)}")
            return
        warned: set[str] = set()  # a warning once per suite, under its first test
        for test in result.tests:  # annotations stay visible outside the fold
            title = escape.command_property(test.id)
            for warning in test.warnings:
                if warning not in warned:
                    self.say(f"::warning title={title}::{escape.command_data(warning)}")
            warned.update(test.warnings)
            if test.status is not Status.PASSED:
                text = f"{test.message} (hint: {test.hint})" if test.hint else test.message
                self.say(f"::error title={title}::{escape.command_data(text)}")

    # --- layout ---------------------------------------------------------------------------

    def _message(self, message: str) -> list[str]:
        lines: list[str] = []
        for part in message.splitlines() or [""]:
            lines += self.style.wrap(part, "    ", "      ")
        return lines

    def _labelled(self, label: str, text: str, indent: str) -> list[str]:
        """`hint: ...` / `warning: ...` wrapped under its text, the label in colour."""
        wrapped = self.style.wrap(f"{label} {text}", indent, indent + " " * (len(label) + 1))
        wrapped[0] = wrapped[0].replace(label, self.style.word(label, label), 1)
        return wrapped

    def _say_untrusted(self, lines: list[str]) -> None:
        """Lines that can carry a server's text (its log, its error answers): under GitHub
        Actions a line of theirs starting with `::` would be a workflow command, so the
        runner is told to ignore commands until a token the server cannot guess."""
        if not self.github:
            self._say_lines(lines)
            return
        import secrets  # under Actions only: hashlib and hmac cost a small run 5% of its CPU

        token = secrets.token_hex(16)
        self.say(f"::stop-commands::{token}")
        self._say_lines(lines)
        self.say(f"::{token}::")

    # --- the heartbeat ---------------------------------------------------------------------

    def _next_test(self) -> None:
        """The next test of the suite starts now (the runner runs them in order)."""
        if not self._queue or self.quiet:
            self._running = None
            return
        name = self._queue.pop(0)
        self._running = _Running(name, time.monotonic(), self.tally.answered)
        if self._beat is None:
            self._beat = threading.Thread(target=self._beating, name="heartbeat", daemon=True)
            self._beat.start()

    def _beating(self) -> None:
        interval = LIVE_BEAT_S if self.live else LOG_BEAT_S
        while True:
            time.sleep(interval)
            running = self._running
            if running is None:
                continue
            elapsed = time.monotonic() - running.started
            if elapsed < interval:
                continue
            answered = self.tally.answered - running.answered_before
            text = f"  ...      {running.name}: {elapsed:.0f} s, {answered} sequences answered"
            self._heartbeat(self.style.fit(text))

    def _heartbeat(self, text: str) -> None:
        with self._lock:
            stream = self.stream or sys.stdout
            if self.live:
                stream.write("\r\x1b[K" + self.style.word("dim", text))
                self._drawn = True
            else:
                stream.write(text + "\n")
            stream.flush()

    def _erase(self) -> None:
        if self._drawn:
            (self.stream or sys.stdout).write("\r\x1b[K")
            self._drawn = False

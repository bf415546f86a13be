"""The base branch's history in words: one line per test that needs attention, a compact
trend, the terminal's table and the JSON of `kl-bitexact history` (pure).

A trend is text, readable without a picture: one glyph per run, oldest first (✓ passed,
✗ failed, ~ flaky, ! error, - not run or skipped, _: the run did not report the test).
Each number that changed across the runs is shown run by run, newest first, beside the
run's commit and time: a small table in the comment, aligned lines in the terminal (a run
that repeats the one before it shares its row). Healthy tests get none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kl_bitexact.compare.gate import ALLOW_KNOWN
from kl_bitexact.compare.history import History, Point, Run, Standing, TestHistory
from kl_bitexact.results.formats import fmt_kl, plural
from kl_bitexact.results.model import Status
from kl_bitexact.untrusted import escape

if TYPE_CHECKING:  # `kl-bitexact history` prints the history alone: no comparison, no budget
    from kl_bitexact.compare.comparison import Comparison, TestDelta
    from kl_bitexact.report.budget import Section

GLYPH = {
    Status.PASSED: "✓",
    Status.FAILED: "✗",
    Status.FLAKY: "~",
    Status.ERROR: "!",
    Status.NOT_RUN: "-",
    Status.NOT_EXERCISED: "?",
    Status.SKIPPED: "-",
}
ABSENT = "_"
# A trend shows at most this many of the newest runs (the history may hold 100).
TREND_RUNS = 30
MAX_NOTES = 3
# A test's numbers run by run: at most this many rows, newest first (issue 37: a series of
# 20 numbers in a sentence cannot be read at a glance).
NUMBER_ROWS = 6


@dataclass(frozen=True)
class Style:
    """How untrusted words are written: Markdown for the comment, plain for a terminal."""

    text: Callable[[str, int], str]
    code: Callable[[str, int], str]
    strong: Callable[[str], str]


COMMENT = Style(escape.text, escape.code, lambda word: f"**{word}**")
TERMINAL = Style(escape.terminal, escape.terminal, lambda word: word)


# --- the comment ------------------------------------------------------------------------


def section(comparison: Comparison, rows: Sequence[TestDelta], gating: int, other: int) -> Section:
    """'On main': for each row needing attention, new or known, and its trend."""
    from kl_bitexact.report.budget import Block, Section

    history = comparison.history
    if history is None:
        return Section([])
    if not history.runs:  # asked for, but none could be had: say why where it would be
        why = partial(_unavailable, history)
        return Section([Block(other, why, "history notes")] if rows else [])
    blocks = [
        Block(gating if d.gating else other, partial(_item, comparison, d), "history lines")
        for d in rows
        if d.head is not None and d.standing is not None
    ]
    return Section(blocks, head=_head(comparison, history))


def _head(comparison: Comparison, history: History) -> str:
    runs = len(history.runs)
    title = f"\n### On {escape.text(history.branch, 80)}: the last {plural(runs, 'run')}\n\n"
    let_through = sum(1 for d in comparison.deltas if d.known_let_through)
    lines = []
    if let_through:
        lines.append(
            f"{plural(let_through, 'known failure')} on {escape.text(history.branch, 80)} let "
            f"through (`--fail-on ...,{ALLOW_KNOWN}`): red here, and red there before this PR.\n"
        )
    lines += [f"> {escape.text(note, 400)}\n" for note in history.notes[:MAX_NOTES]]
    if len(history.notes) > MAX_NOTES:
        lines.append(f"> … {len(history.notes) - MAX_NOTES} more notes\n")
    return title + "".join(lines) + ("\n" if lines else "")


def _unavailable(history: History) -> str:
    branch = escape.text(history.branch, 80)
    notes = "; ".join(history.notes[:MAX_NOTES]) or "no runs"
    return f"\n### On {branch}: no history\n\n> {escape.text(notes, 600)}\n"


def _item(comparison: Comparison, delta: TestDelta) -> str:
    history = comparison.history
    assert history is not None and delta.verdict is not None and delta.standing is not None
    test = f"{escape.code(delta.id, 160)} ({escape.text(delta.suite, 80)})"
    words = standing_line(delta.standing, history, delta.id, COMMENT)
    line = f"- {comparison.state(delta).word.icon} {test}: {words}"
    if delta.known_let_through:
        line += " · let through"
    found = history.of(delta.id)
    if found is None or not found.present:
        return line + "\n"
    trend = f"\n  {trend_text(found, history, COMMENT)}\n"
    return line + trend + _numbers_table(found, history)


def standing_line(standing: Standing, history: History, test_id: str, style: Style) -> str:
    """`new: never failed in the last 20 runs of main`, `known: failed 6 of ...`."""
    branch = style.text(history.branch, 80)
    found = history.of(test_id)
    if standing is Standing.UNSEEN or found is None:
        runs = plural(len(history.runs), "run")
        return f"{style.strong('unseen')}: in none of the last {runs} of {branch}"
    runs = _of_runs(found, history, branch)
    if standing is Standing.NEW:
        return f"{style.strong('new')}: never failed in {runs}"
    return f"{style.strong('known')}: {_failed(found, history, runs, style)}"


def _failed(found: TestHistory, history: History, runs: str, style: Style) -> str:
    first = history.commit_at(found.first_failure)
    at = f", first at {style.code(first[:7], 12)}" if first else ""
    flaky = f" ({found.flaky} flaky)" if found.flaky else ""
    return f"failed {found.failed} of {runs}{flaky}{at}"


def _of_runs(found: TestHistory, history: History, branch: str) -> str:
    if found.present == len(history.runs):
        return f"the last {plural(len(history.runs), 'run')} of {branch}"
    return f"the {found.present} of the last {len(history.runs)} runs of {branch} that ran it"


def trend_text(found: TestHistory, history: History, style: Style) -> str:
    """Glyphs per run, then whether and where its numbers first changed (the numbers
    themselves: `number_rows`)."""
    points = found.points[-TREND_RUNS:]
    shown = (
        f"last {len(points)} of {len(found.points)}, " if len(points) < len(found.points) else ""
    )
    glyphs = "".join(ABSENT if p is None else GLYPH[p.status] for p in points)
    quoted = f"`{glyphs}`" if style is COMMENT else f"[{glyphs}]"
    parts = [f"{quoted} ({shown}oldest → newest)"]
    if found.changed:
        first = history.commit_at(found.changes[0])
        at = f", first at {style.code(first[:7], 12)}" if first else ""
        parts.append(f"numbers changed in {plural(len(found.changes), 'run')}{at}")
    else:
        parts.append(f"numbers identical in all {plural(found.present, 'run')}")
    return " · ".join(parts)


Series = tuple[str, list[str | None]]  # a number's name and its value in each run


def _changed_series(points: Sequence[Point | None]) -> list[Series]:
    """Each number that is not the same in every run, its value per run (None where the
    run did not report it)."""
    kl = [None if p is None else p.kl for p in points]
    found: list[Series] = []
    if len({v for v in kl if v is not None}) > 1:
        found.append(("avg KL", [None if v is None else fmt_kl(v) for v in kl]))
    differing = [None if p is None else (p.mismatched, p.tokens) for p in points]
    hits = [None if p is None else (p.hits, p.hits_total) for p in points]
    for name, pairs in (("differing logprobs", differing), ("cache hits", hits)):
        counted = _count_series(name, pairs)
        if counted is not None:
            found.append(counted)
    return found


def _count_series(
    name: str, pairs: Sequence[tuple[int | None, int | None] | None]
) -> Series | None:
    """Counts out of totals that changed; a constant total is named once, `(of 32)`."""
    known = [pair for pair in pairs if pair is not None and pair[0] is not None]
    if len(set(known)) <= 1:
        return None
    totals = {pair[1] for pair in known}
    if len(totals) == 1:
        values = [None if p is None or p[0] is None else str(p[0]) for p in pairs]
        return f"{name} (of {totals.pop()})", values
    return name, [None if p is None or p[0] is None else f"{p[0]}/{p[1]}" for p in pairs]


@dataclass(frozen=True)
class NumberRow:
    """Runs in a row (newest first) with the same result and numbers: the newest's commit
    and time, how many older runs repeat it, and the cells."""

    commit: str
    when: str
    older: int
    result: str
    cells: tuple[str, ...]


def number_rows(found: TestHistory, history: History) -> tuple[list[str], list[NumberRow], int]:
    """The changed numbers' names, their rows newest first (at most `NUMBER_ROWS`), and
    how many older runs are left out. No names: nothing changed, no rows."""
    points = found.points[-TREND_RUNS:]
    series = _changed_series(points)
    runs = history.runs[len(history.runs) - len(points) :]
    rows: list[NumberRow] = []
    for index in reversed(range(len(points)) if series else ()):
        row = _number_row(points[index], runs[index], [values[index] for _, values in series])
        if row is None:
            continue
        if rows and (rows[-1].result, rows[-1].cells) == (row.result, row.cells):
            rows[-1] = dataclasses.replace(rows[-1], older=rows[-1].older + 1)
        else:
            rows.append(row)
    left_out = sum(1 + row.older for row in rows[NUMBER_ROWS:])
    return [name for name, _ in series], rows[:NUMBER_ROWS], left_out


def _number_row(point: Point | None, run: Run, values: Sequence[str | None]) -> NumberRow | None:
    if point is None:  # the run did not report the test: the trend's `_` says so
        return None
    cells = tuple("-" if value is None else value for value in values)
    result = f"{GLYPH[point.status]} {point.status.value.replace('_', ' ')}"
    return NumberRow(*_run_label(run), 0, result, cells)


def _run_label(run: Run) -> tuple[str, str]:
    when = (run.created_at or "")[:16].replace("T", " ")
    return (run.commit or "?")[:7], when or "time unknown"


def _numbers_table(found: TestHistory, history: History) -> str:
    """The comment's table of a test's changed numbers, inside its list item."""
    names, rows, left_out = number_rows(found, history)
    if not rows:
        return ""
    branch = escape.text(history.branch, 80)
    header = [f"run on {branch} (newest first)", "result", *(escape.text(n, 40) for n in names)]
    lines = ["", _cells(header), _cells(["---"] * len(header))]
    for row in rows:
        run = f"{escape.code(row.commit, 12)} {escape.text(row.when, 40)}"
        if row.older:
            run += f" and the {plural(row.older, 'run')} before it"
        lines.append(_cells([run, row.result, *(escape.text(c, 40) for c in row.cells)]))
    if left_out:
        lines += ["", f"… {plural(left_out, 'older run')} not shown"]
    return "\n".join(f"  {line}" if line else "" for line in lines) + "\n"


def _cells(values: Sequence[str]) -> str:
    return "| " + " | ".join(values) + " |"


def _number_lines(found: TestHistory, history: History) -> list[str]:
    """The terminal's: the same rows, aligned."""
    names, rows, left_out = number_rows(found, history)
    if not rows:
        return []
    table = [["newest first", "result", *names]]
    for row in rows:
        run = f"{escape.terminal(row.commit, 12)} {escape.terminal(row.when, 40)}"
        run += f" (+{row.older} before)" if row.older else ""
        table.append([run, row.result, *row.cells])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [
        "    " + "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    more = f"    … {plural(left_out, 'older run')} not shown (--json has every run)"
    return lines + ([more] if left_out else [])


# --- the terminal and JSON (`kl-bitexact history`) ----------------------------------------


def terminal_lines(history: History, *, show_all: bool = False) -> list[str]:
    """What `kl-bitexact history` prints: the window, then each test that failed or
    changed (every test with `show_all`), then how many were steady."""
    lines = [_window(history)]
    lines += [f"  note: {escape.terminal(note, 400)}" for note in history.notes]
    tests = list(history.tests.values()) if show_all else history.attention
    tests.sort(key=lambda t: (-t.failed, -len(t.changes), t.suite, t.id))
    for test in tests:
        lines.append("")
        lines.append(f"{escape.terminal(test.id, 200)} ({escape.terminal(test.suite, 80)})")
        lines.append(f"  {_summary(test, history)}")
        lines.append(f"  {trend_text(test, history, TERMINAL)}")
        lines += _number_lines(test, history)
    steady = sum(1 for test in history.tests.values() if test.steady)
    if history.runs:
        lines.append("")
        lines.append(
            f"{plural(len(history.tests), 'test')}: {len(history.attention):,} failed or "
            f"changed, {steady:,} steady (identical numbers in every run that ran them)"
        )
    return lines


def _window(history: History) -> str:
    runs = history.runs
    branch = escape.terminal(history.branch, 80)
    if not runs:
        return f"history of {branch}: no runs"
    return f"history of {branch}: {plural(len(runs), 'run')}, {_when(runs[0])} → {_when(runs[-1])}"


def _when(run: Run) -> str:
    commit = escape.terminal((run.commit or "?")[:7], 12)
    return f"{commit} ({escape.terminal(run.created_at or 'time unknown', 40)})"


def _summary(test: TestHistory, history: History) -> str:
    if not test.failed:
        return f"never failed in {plural(test.present, 'run')}"
    return _failed(test, history, plural(test.present, "run"), TERMINAL)


def as_json(history: History, *, show_all: bool = True) -> dict[str, Any]:
    """The history for machines: the runs (oldest first) and each test's facts and points."""
    tests = list(history.tests.values()) if show_all else history.attention
    # Each distinct point as JSON once: the history shares equal points (one object per set
    # of numbers), so 20 runs of 1,000 tests are 20,000 points but a handful of objects.
    points: dict[int, dict[str, Any]] = {}
    return {
        "branch": history.branch,
        "runs": [
            {"run_id": r.run_id, "commit": r.commit, "created_at": r.created_at, "source": r.source}
            for r in history.runs
        ],
        "notes": list(history.notes),
        "tests": [_test_json(test, history, points) for test in tests],
    }


def _test_json(
    test: TestHistory, history: History, points: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    changes = test.changes
    return {
        "suite": test.suite,
        "id": test.id,
        "runs": test.present,
        "failed": test.failed,
        "flaky": test.flaky,
        "changed": bool(changes),
        "first_failure_commit": history.commit_at(test.first_failure),
        "first_change_commit": history.commit_at(changes[0] if changes else None),
        "points": [None if p is None else _point_json(p, points) for p in test.points],
    }


def _point_json(point: Point, seen: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """`point` as JSON, the same object for the same point (keyed by identity: the points
    outlive the document, so no key is reused)."""
    found = seen.get(id(point))
    if found is None:
        found = seen[id(point)] = {
            "status": point.status.value,
            "kl_div": point.kl,
            "mismatched": point.mismatched,
            "tokens": point.tokens,
            "cache_hits": point.hits,
            "cache_total": point.hits_total,
        }
    return found

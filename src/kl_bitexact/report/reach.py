"""Reach in the comment (pure): the PR's change, reached or not, as a section; a test's
named functions as one line of its details, shown where it matters (a test that did not
pass)."""

from __future__ import annotations

from functools import partial

from kl_bitexact.compare.comparison import Comparison
from kl_bitexact.report.budget import Block, Section
from kl_bitexact.results.formats import plural
from kl_bitexact.results.model import ChangedFunction, Changes, FunctionReach, RanWhen, Reach
from kl_bitexact.untrusted import escape

MAX_TESTS_NAMED = 5
HEAD = "\n### The PR's change under the bit-exact suites\n\n"


def section(comparison: Comparison, gating_tier: int, notes_tier: int) -> Section:
    """Changed functions no test executed first (gating under `--fail-on ...,unreached`),
    then those that ran, each with the tests that ran it; empty without `--reach-diff`."""
    changes = comparison.head.changes
    if changes is None:
        return Section([])
    unreached_tier = gating_tier if comparison.policy.unreached else notes_tier
    blocks = [Block(unreached_tier, partial(_summary, changes), "change reach")]
    blocks += [
        Block(
            unreached_tier if not (changes.measured and f.ran) else notes_tier + 1,
            partial(_item, f, changes.measured),
            "changed function",
        )
        for f in sorted(changes.functions, key=lambda f: changes.measured and f.ran)
    ]
    return Section(blocks, head=HEAD)


def _summary(changes: Changes) -> str:
    span = f"{escape.code(changes.base[:12], 20)}..{escape.code(changes.head[:12], 20)}"
    total = plural(len(changes.functions), "changed function")
    if not changes.functions:
        return f"No function of the engine's Python code changed ({span}).\n\n"
    if not changes.measured:
        why = escape.text(changes.why_not, 400)
        return f"{total} in the engine's Python code ({span}); **reach not measured**: {why}\n\n"
    never = len(changes.unreached)
    lines = (
        ""
        if not changes.lines_why_not
        else (f" No line data: {escape.text(changes.lines_why_not, 300)}.")
    )
    return (
        f"{total} in the engine's Python code ({span}): {len(changes.functions) - never} "
        f"executed by the bit-exact suites, **{never} never executed**.{lines}\n\n"
    )


def _item(function: ChangedFunction, measured: bool) -> str:
    where = escape.text(f"{function.path}:{function.line}", 300)
    name = f"{escape.code(function.name, 300)} ({where})"
    if not measured:
        return f"- ❔ {name}: not measured\n"
    if not function.ran:
        return f"- 🚫 {name}: **never executed**{_lines(function)}\n"
    return f"- ✅ {name}: {_by(function)}{_lines(function)}\n"


def _by(function: ChangedFunction) -> str:
    shown = [escape.code(test, 160) for test in function.tests[:MAX_TESTS_NAMED]]
    more = len(function.tests) - len(shown)
    named = ", ".join(shown) + (f" and {more} more" if more else "")
    startup = "while its server started" if function.at_startup else ""
    return "by " + " · ".join(p for p in (named, startup) if p) if named else startup


def _lines(function: ChangedFunction) -> str:
    if function.lines_not_run is None or function.lines_run is None:
        return ""
    total = len(function.lines_run) + len(function.lines_not_run)
    if not total:
        return ""
    missed = ", ".join(str(n) for n in function.lines_not_run[:20])
    more = "…" if len(function.lines_not_run) > 20 else ""
    not_run = f" (not run: line {missed}{more})" if function.lines_not_run else ""
    return f"; changed lines run {len(function.lines_run)}/{total}{not_run}"


def details(reach: Reach) -> str:
    """A test's named functions, one line: what ran (and when), what did not and why."""
    if not reach.measured:
        return f"\nReach: **not measured** - {escape.text(reach.why_not, 400)}\n"
    if not reach.functions:
        return ""
    return "\nReach: " + " · ".join(_function(f) for f in reach.functions) + "\n"


def _function(function: FunctionReach) -> str:
    name = escape.code(function.name, 200)
    if function.when is RanWhen.TEST:
        return f"{name} ran"
    if function.when is RanWhen.STARTUP:
        return f"{name} ran while the server started"
    note = f" ({escape.text(function.note, 200)})" if function.note else ""
    return f"{name} **did not run**{note}"

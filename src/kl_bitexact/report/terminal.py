"""What `run` prints when it ends, for a person at a terminal (pure).

The PR comment is Markdown with HTML escapes, unreadable in a terminal, and its most useful
fact - where a red test first diverged - sat only in report.md (issue 20). So the run ends
with one plain line per test that is not ok: its state in the words of every report (issue
37), its first divergence (sample, decoded token, position against the cached prefix and
the page and checkpoint boundaries) or, with none, the first line of why it failed; and a
last line that says why the exit code is not 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from kl_bitexact.compare import states
from kl_bitexact.compare.comparison import Comparison
from kl_bitexact.errors import ExitCode
from kl_bitexact.report import causes
from kl_bitexact.results.formats import plural
from kl_bitexact.results.model import Status, TestResult
from kl_bitexact.untrusted import escape

# Plenty for a boundary hint; a server's error message can be megabytes.
MAX_REASON = 400
MAX_NAMED = 3  # tests named in the exit line per reason


@dataclass(frozen=True)
class Line:
    """One line of the end of a run: the state (padded to the others'), whose colour the
    test's status gives, then the tests and why."""

    status: Status
    state: str
    text: str

    def plain(self, width: int) -> str:
        return f"  {self.state:<{width}}  {self.text}"


def not_passed_lines(comparison: Comparison) -> list[Line]:
    """`  regression  suite::test: first divergence ...`, one per test in a state that is
    not ok or skipped, the state in the words of every report (`states`); tests in one
    state for one same reason (a server that did not start) share one line:
    `  could not run  suite::a and 7 more: why`."""
    groups: dict[tuple[str, str], tuple[Status, list[str]]] = {}
    for delta in comparison.deltas:
        state, test = comparison.state(delta), delta.head
        if state.kind in states.QUIET or test is None:
            continue
        # A test not judged says what it needs where others say why they failed.
        label = state.word.one if state.needs else state.text()
        why = f"needs {escape.terminal(state.needs, MAX_REASON)}" if state.needs else reason(test)
        key = (escape.terminal(label, 200), why)
        groups.setdefault(key, (test.status, []))[1].append(delta.id)
    return [
        Line(status, state, f"{_tests(ids)}: {why}")
        for (state, why), (status, ids) in groups.items()
    ]


def aligned(lines: list[Line]) -> list[str]:
    width = max((len(line.state) for line in lines), default=0)
    return [line.plain(width) for line in lines]


def tally(comparison: Comparison) -> str:
    """`1 regression, 7 ok`: how many tests are in each state, in the states' own words."""
    found = states.tally(comparison.state(d) for d in comparison.deltas)
    return ", ".join(states.counted(kind, n) for kind, n in found) or "no tests"


def exit_line(comparison: Comparison, code: ExitCode) -> str | None:
    """Why the run exits non-zero, in one line: the rule and the tests it names
    (`exit 1, gate failed: 1 regression (s::t); --fail-on regression`); None on exit 0."""
    decision = comparison.decision
    if code is ExitCode.GATE_PASSED:
        return None
    named = [_named(comparison, kind) for kind in _gating_kinds(comparison)]
    why = "; ".join(part for part in named if part) or ", ".join(decision.reasons)
    rule = f"--fail-on {comparison.policy.fail_on_text}"
    return f"kl-bitexact: exit {int(code)}, {decision.label}: {why or 'see above'} ({rule})"


def _gating_kinds(comparison: Comparison) -> list[states.Kind]:
    return [
        kind
        for kind, _ in states.tally(
            s for s in (comparison.state(d) for d in comparison.deltas) if s.gating
        )
    ]


def _named(comparison: Comparison, kind: states.Kind) -> str:
    ids = [d.id for d in comparison.deltas if d.gating and comparison.state(d).kind is kind]
    shown = ", ".join(escape.terminal(i, 120) for i in ids[:MAX_NAMED])
    more = f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else ""
    found = causes.unmeasured(comparison.deltas)
    if kind is states.Kind.COULD_NOT_RUN and found is not None:
        # `could not run: 8 tests (a, b, c and 5 more): the server exited with code 2`
        why = escape.terminal(causes.short(found.message), MAX_REASON)
        return f"{plural(len(ids), 'test')} ({shown}{more}): {why}"
    return f"{states.counted(kind, len(ids))} ({shown}{more})"


def _tests(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{ids[0]} and {plural(len(ids) - 1, 'more test')}"


def reason(test: TestResult) -> str:
    # Server text goes to a terminal: no control sequences, one line.
    if test.first_divergence:
        return escape.terminal(first_divergence(test), MAX_REASON)
    message = test.message.strip().splitlines()
    return escape.terminal(message[0], MAX_REASON) if message else test.status.value


def first_divergence(test: TestResult) -> str:
    first = test.first_divergence[0]
    parts = [f"first divergence in sample {first.sample} at decoded token {first.token_index}"]
    # The boundary hint already names the position, the cached prefix and the boundaries.
    if first.hint:
        parts.append(first.hint)
    if first.cached_tokens is None:
        parts.append("cached tokens not reported by the server")
    elif not first.hint:
        parts.append(f"{first.cached_tokens} cached tokens")
    others = len(test.first_divergence) - 1
    if others:
        parts.append(f"{others} more differing {'sample' if others == 1 else 'samples'}")
    return "; ".join(parts)

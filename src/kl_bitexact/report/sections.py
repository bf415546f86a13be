"""The body of the report: test table, blocked tests, warnings, findings, details (pure).

Each part is a `budget.Section` of lazily rendered blocks with a priority, so the
comment can be trimmed to its budget without rendering what will not fit.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from kl_bitexact.compare import states
from kl_bitexact.compare.blockers import effective_state
from kl_bitexact.compare.comparison import Blocker, Comparison, TestDelta, Transition
from kl_bitexact.compare.gate import SEVERITY, WORSE_FACTOR, Verdict
from kl_bitexact.report import against_base, causes, charts, history, proofs, reach, terminal
from kl_bitexact.report.budget import Block, Section
from kl_bitexact.report.wording import measured, passed_yet_differs
from kl_bitexact.results.aggregate import KL_ROUNDING
from kl_bitexact.results.formats import MISSING, fmt_kl, hits_long, plural, shown_kl
from kl_bitexact.results.model import (
    CacheHits,
    ExactMatch,
    Fact,
    Repeats,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)
from kl_bitexact.untrusted import escape
from kl_bitexact.untrusted.escape import ELLIPSIS

if TYPE_CHECKING:  # findings are read by `report --findings`; `run` renders none
    from kl_bitexact.registry.findings_file import Finding

# Tiers of the budget, filled in this order: only the headline and footer are KEEP;
# gating rows come right after, so they are cut only if they alone overflow. Details are
# trimmed first, except the drill-down of gating tests (their first divergences), which
# a reviewer needs more than the rows of passing tests.
GATING, ATTENTION, NOTES, GATING_DETAILS, OTHER_ROWS, DETAILS = 1, 2, 3, 4, 5, 6
_REMOVED_RANK = SEVERITY[Verdict.SKIPPED]  # removed tests sort with the skipped ones


def body(comparison: Comparison, findings: Sequence[Finding]) -> list[Section]:
    """The sections between the headline and the footer, in reading order."""
    attention, others = _split_rows(comparison.deltas)
    return [
        _attention_table(comparison, attention),
        _reproduce_section(comparison, attention),
        history.section(comparison, attention, ATTENTION, NOTES),
        proofs.section(comparison, GATING, NOTES),
        reach.section(comparison, GATING, NOTES),
        _blocked_section(comparison),
        _findings_section(findings),
        _other_rows(comparison, others),
        *_details_sections(comparison),
    ]


# --- the table --------------------------------------------------------------------------

# Short cells that fit a comment's ~1000 px without wrapping a number (issue 27): the suite
# is the id's first part, the hit ratio and prediction are in the test's details.
_TABLE_HEAD = (
    "|  | test | avg KL | Δ KL | differing logprobs | cache hits | status |\n"
    "|---|---|---|---|---|---|---|\n"
)
_BOLD_GATES = "**Bold** status: gates the merge.\n\n"


def _split_rows(deltas: Iterable[TestDelta]) -> tuple[list[TestDelta], list[TestDelta]]:
    attention: list[TestDelta] = []
    others: list[TestDelta] = []
    for delta in deltas:
        (attention if _needs_attention(delta) else others).append(delta)
    attention.sort(key=lambda d: (not d.gating, _rank(d)))
    return attention, others


def _needs_attention(delta: TestDelta) -> bool:
    if delta.transition in _MOVED_OUT or delta.knobs:
        return True
    return delta.verdict not in _QUIET


_MOVED_OUT = frozenset({Transition.REMOVED, Transition.NEWLY_NOT_RUN})
_QUIET = frozenset({Verdict.OK, Verdict.NOT_A_KL_CHECK, Verdict.NOT_JUDGED, Verdict.SKIPPED})


def _rank(delta: TestDelta) -> int:
    return _REMOVED_RANK if delta.verdict is None else SEVERITY[delta.verdict]


def _attention_table(comparison: Comparison, rows: Sequence[TestDelta]) -> Section:
    blocks = [
        Block(
            GATING if group[0].gating else ATTENTION,
            partial(_row, comparison, group),
            "rows of tests needing attention",
        )
        for group in _same_cause(rows)
    ]
    legend = _BOLD_GATES if any(d.gating for d in rows) else ""
    return Section(blocks, head="\n### Needs attention\n\n" + legend + _TABLE_HEAD)


def _reproduce_section(comparison: Comparison, rows: Sequence[TestDelta]) -> Section:
    """Each gating test's reason and the command that runs it again, without opening a
    details block (issue 37); tests that could not run have theirs in the headline."""
    suites = {suite.name: suite for suite in comparison.head.suites}
    blocks = [
        Block(GATING, partial(_reproduce, comparison, d, suites.get(d.suite)), "reproduce lines")
        for d in rows
        if d.gating and d.head is not None and d.verdict is not Verdict.COULD_NOT_RUN
    ]
    return Section(blocks, head="\n**Why it gates, and how to run it again:**\n\n")


def _reproduce(comparison: Comparison, delta: TestDelta, suite: SuiteResult | None) -> str:
    assert delta.head is not None
    state = comparison.state(delta)
    why = escape.text(terminal.reason(delta.head), 400)
    line = f"- {state.word.icon} {escape.code(delta.id, 160)}: {why}"
    repeats = delta.head.repeats.count if delta.head.repeats is not None else 1
    command = reproduce_command(delta.id, suite, repeats)
    if command is None:
        return line + f"  \n  {NO_COMMAND}\n"
    return line + f"  \n  {escape.code(command, 600)}\n"


# Said where a command would stand, so that its absence is not read as an oversight.
NO_COMMAND = "no command to run it again: the results do not record how it was run"
# `_kept_apart`'s id for a node id pytest reported more than once (ingest/junit_results.py).
_REPORT_SUFFIX = re.compile(r" \(report \d+(?:\.\d+)?\)$")


def reproduce_command(test_id: str, suite: SuiteResult | None, repeats: int = 1) -> str | None:
    """A pytest test's recorded command with its node id (`kl-bitexact pytest -- 'FILE::ID'`);
    a suite file's `kl-bitexact run FILE --select 'ID'` (no FILE for the bundled example;
    `--repeat N` as the run that found a flaky test); None when the results say neither
    (a JUnit import without the plugin's node ids, older files)."""
    if suite is not None and suite.rerun is not None:
        return shlex.join([*suite.rerun, _REPORT_SUFFIX.sub("", test_id)])
    file = suite.file if suite is not None else None
    if file is None:
        return None
    quoted = "'" + test_id.replace("'", "'\\''") + "'"
    where = "" if file.startswith("<bundled") else f" {shlex.quote(file)}"
    again = f" --repeat {repeats}" if repeats > 1 else ""
    return f"kl-bitexact run{where} --select {quoted}{again}"


def _same_cause(rows: Sequence[TestDelta]) -> list[list[TestDelta]]:
    """Rows in order, tests that could not run for one same reason as one row (a dead
    server is one line, not eight alike)."""
    groups: dict[object, list[TestDelta]] = {}
    for delta in rows:
        test = delta.head
        alike = delta.verdict is Verdict.COULD_NOT_RUN and test is not None
        key = (delta.gating, test.message.split("\n")[0]) if alike and test else id(delta)
        groups.setdefault(key, []).append(delta)
    return list(groups.values())


def _other_rows(comparison: Comparison, rows: Sequence[TestDelta]) -> Section:
    blocks = [
        Block(OTHER_ROWS, partial(_row, comparison, [d]), "rows of the other tests") for d in rows
    ]
    found = states.tally(comparison.state(d) for d in rows)
    summary = " · ".join(states.counted(kind, count) for kind, count in found)
    head = f"\n<details><summary>{summary or 'no other tests'}</summary>\n\n" + _TABLE_HEAD
    return Section(blocks, head=head, tail="\n</details>\n")


def _row(comparison: Comparison, group: Sequence[TestDelta]) -> str:
    delta = group[0]
    state = comparison.state(delta)
    head, base = delta.head, delta.base
    if len(group) > 1:
        return _group_row(comparison, group)
    repeats = head.repeats if head is not None and head.status is Status.FLAKY else None
    if repeats is not None:
        numbers = _repeat_cells(repeats)
    else:
        numbers = [
            fmt_kl(head.kl_div) if head else MISSING,
            _kl_change_cell(delta),
            _exact_cell(head.exact if head else None, base.exact if base else None),
            _hits_cell(head.cache_hits if head else None, base.cache_hits if base else None),
        ]
    cells = [state.word.icon, escape.code(delta.id, 160), *numbers, _status_cell(comparison, delta)]
    return "| " + " | ".join(cells) + " |\n"


def _group_row(comparison: Comparison, group: Sequence[TestDelta]) -> str:
    """`8 tests` with the first few ids; their numbers are all missing, said once."""
    first = group[0]
    shown = ", ".join(escape.code(d.id, 80) for d in group[:3])
    more = f" and {len(group) - 3} more" if len(group) > 3 else ""
    cells = [
        comparison.state(first).word.icon,
        f"{plural(len(group), 'test')}: {shown}{more}",
        MISSING,
        MISSING,
        MISSING,
        MISSING,
        _status_cell(comparison, first),
    ]
    return "| " + " | ".join(cells) + " |\n"


def _repeat_cells(repeats: Repeats) -> list[str]:
    """A flaky test's numbers are its repeats', side by side: what disagreed, not a
    decode against a replay."""
    kls = " · ".join(fmt_kl(kl) for kl in repeats.kl[:MAX_REPEATS_IN_CELL])
    hits = " · ".join(
        MISSING if hit is None else str(hit) for hit in repeats.cache_hits[:MAX_REPEATS_IN_CELL]
    )
    changed = f"{repeats.changed}/{repeats.positions} changed between repeats"
    return [kls or MISSING, MISSING, changed, hits or MISSING]


MAX_REPEATS_IN_CELL = 8


def _kl_change_cell(delta: TestDelta) -> str:
    if delta.kl_change is None:
        return "new" if delta.transition is Transition.NEW else MISSING
    assert delta.head is not None and delta.base is not None
    # Of the KLs as shown (k3's rounding below 0 is 0), so the cells agree with each other;
    # a change within k3's own rounding is no change (+1.45e-18 was shown).
    change = (shown_kl(delta.head.kl_div) or 0.0) - (shown_kl(delta.base.kl_div) or 0.0)
    return "0" if abs(change) <= KL_ROUNDING else f"{change:+.2e}"


def _exact_cell(head: ExactMatch | None, base: ExactMatch | None) -> str:
    if head is None:
        return MISSING
    now = f"{head.mismatched}/{head.tokens}"
    if head.not_reported:
        now += f" ({head.not_reported} not reported)"
    if base is None or base.mismatched == head.mismatched:
        return now
    return f"{base.mismatched} → {now}"


def _hits_cell(head: CacheHits | None, base: CacheHits | None) -> str:
    if head is None:
        return MISSING
    now = f"{head.hit}/{head.total}"
    if base is None or base.hit == head.hit:
        return now
    return f"{base.hit} → {now}"


def _hits_detail(hits: CacheHits) -> str:
    return f"cache hits {hits_long(hits)}"


def _said(words: str) -> str:
    return escape.text(words, 300)


def _status_cell(comparison: Comparison, delta: TestDelta) -> str:
    """The test's state (`states`: the words of every other part), bold when it gates."""
    words = comparison.state(delta).text(blocker_link, _said)
    if delta.head is not None and passed_yet_differs(delta.head):
        # Green by its own threshold while logprobs differ (the column beside says how many).
        words += " · under its threshold"
    if delta.knobs:
        # A dropped knob disarms a test that stays green (sglang PR 34356): said beside it.
        words += " · knobs changed"
    return f"**{words}**" if delta.gating else words


# --- blocked tests, warnings, findings --------------------------------------------------


def _blocked_section(comparison: Comparison) -> Section:
    blocked = [d for d in comparison.deltas if d.blockers and d.head is not None]
    blocked.sort(key=_rank)
    blocks = [Block(NOTES, partial(_blocked_item, d), "blocked-test notes") for d in blocked]
    return Section(blocks, head="\n### Blocked tests\n\n")


def _blocked_item(delta: TestDelta) -> str:
    assert delta.head is not None and delta.verdict is not None
    sentence = _BLOCKED_SENTENCE[delta.verdict].format(
        refs=_refs(delta.blockers),
        state=effective_state([b.state for b in delta.blockers]).value,
        measured=measured(delta.head),
        why=_unknown_why(delta.blockers),
    )
    test = f"{escape.code(delta.id, 160)} ({escape.text(delta.suite, 80)})"
    return f"- {states.WORDS[states.Kind(delta.verdict.value)].icon} {test}: {sentence}\n"


def _refs(blockers: Sequence[Blocker]) -> str:
    """One reference plainly; several with the state of each, since they may differ."""
    if len(blockers) == 1:
        return _ref(blockers[0])
    return ", ".join(f"{_ref(b)} ({b.state.value})" for b in blockers)


def _ref(blocker: Blocker) -> str:
    if blocker.ref is not None:
        return blocker_link(blocker)
    return f"{escape.code(blocker.text, 120)} (unresolvable reference)"


def blocker_link(blocker: Blocker) -> str:
    """A clickable blocker that records no cross-reference on it: the text escaped like any
    `#N` from a results file (written plainly, GitHub linked it and left a backlink on that
    issue, in whatever project the PR named: issue 14, case 8), the link through
    redirect.github.com, the host GitHub documents for links without backlinks (the
    convention Dependabot and Renovate follow; docs/cli.md says so)."""
    if blocker.ref is None:
        return escape.code(blocker.text, 120)
    if not _LINKABLE.match(blocker.ref):  # GitHub's names are ASCII: a look-alike gets no link
        return escape.text(blocker.ref, 120)
    return f"[{escape.text(blocker.ref, 120)}]({blocker_url(blocker.ref)})"


_LINKABLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}#[0-9]{1,10}$")


def blocker_url(ref: str) -> str:
    """`owner/repo#N` (canonical: parse_ref made it) as its redirect.github.com address;
    GitHub sends an issue's address on to the pull request when N is one."""
    repo, number = ref.rsplit("#", 1)
    return f"https://redirect.github.com/{repo}/issues/{number}"


def _unknown_why(blockers: Sequence[Blocker]) -> str:
    """Why the unknown blockers are unknown: their reasons (not looked up: outside the
    repositories or over the lookup limit; lookup failed), else the general one."""
    reasons = dict.fromkeys(b.reason for b in blockers if b.reason)
    if not reasons:
        return "GitHub could not tell, or blockers were not resolved"
    return escape.text("; ".join(reasons), 400)


_BLOCKED_SENTENCE = {
    Verdict.EXPECTED_RED: "expected red until {refs} merges - {state}; {measured}",
    Verdict.UNEXPECTED_GREEN: "green although {refs} is still open - check that the "
    "test still detects the bug, or remove the marker; {measured}",
    Verdict.REGRESSION: "{refs} merged but this test is still red; {measured}",
    Verdict.FAILING: "{refs} merged but this test is still red; {measured}",
    Verdict.STILL_FAILING: "{refs} merged but this test is still red; {measured}",
    Verdict.UNBLOCKED: "{refs} merged and the test is green: remove the `blocked_by` marker",
    Verdict.STALE_MARKER: "{refs} was closed without merging: update or remove the "
    "marker; {measured}",
    Verdict.UNKNOWN: "state of {refs} is unknown ({why}); {measured}",
    Verdict.COULD_NOT_RUN: "blocked by {refs}, but the test could not run; {measured}",
    Verdict.INFRA: "blocked by {refs}, but the check did not measure; {measured}",
    Verdict.NOT_EXERCISED: "blocked by {refs}, but the test did not exercise what it claims",
    Verdict.FLAKY: "blocked by {refs}, and its repeats disagree (flaky); {measured}",
    Verdict.NOT_A_KL_CHECK: "blocked by {refs}; passed - not a KL check",
    Verdict.NOT_JUDGED: "blocked by {refs}; not judged on the reference engine",
    Verdict.SKIPPED: "blocked by {refs}; skipped",
    Verdict.OK: "blocked by {refs}; {measured}",
}


def _findings_section(findings: Sequence[Finding]) -> Section:
    blocks = [Block(NOTES, partial(_finding_row, f), "registration findings") for f in findings]
    head = (
        "\n### Registration findings\n\n"
        "|  | where | code | finding | fix |\n|---|---|---|---|---|\n"
    )
    return Section(blocks, head=head)


def _finding_row(finding: Finding) -> str:
    icon = "❌" if finding.severity == "error" else "⚠️"
    where = finding.file + (f":{finding.line}" if finding.line is not None else "")
    cells = [
        icon,
        escape.code(where, 160),
        escape.code(finding.code, 40),
        escape.text(finding.message, 400),
        escape.text(finding.fix, 300),
    ]
    return "| " + " | ".join(cells) + " |\n"


# --- details per suite ------------------------------------------------------------------


def _details_sections(comparison: Comparison) -> list[Section]:
    by_suite: dict[str, list[TestDelta]] = {}
    said = causes.unmeasured(comparison.deltas)
    # A suite's gating tests first: the failure is what a reader opens the details for
    # (in order otherwise, as a stable sort on `not gating` had them).
    gating = [d for d in comparison.deltas if d.gating]
    for delta in gating + [d for d in comparison.deltas if not d.gating]:
        test = delta.head
        # Tests that could not run for the cause the headline gives have nothing more to say.
        if (
            test is not None
            and (_worth_details(test) or delta.against_base or delta.knobs)
            and not causes.said_once(said, test)
        ):
            by_suite.setdefault(delta.suite, []).append(delta)
    servers = {suite.name: suite.server for suite in comparison.head.suites}
    # A suite with no result at all (the run stopped before it) has no server to show.
    return [_suite_details(name, servers.get(name), deltas) for name, deltas in by_suite.items()]


def _suite_details(name: str, server: ServerInfo | None, deltas: Sequence[TestDelta]) -> Section:
    summary = f"Details: {escape.text(name, 80)} ({plural(len(deltas), 'test')})"
    head = f"\n<details><summary>{summary}</summary>\n\n"
    if server is not None:
        args = " ".join(_off_disk(arg) for arg in server.args)
        shown = escape.code(server.engine, 40) + (" " + escape.code(args, 600) if args else "")
        head += f"Server: {shown}{_engine_identity(server)}\n"
    shared = _shared_warnings(deltas)
    if shared:
        head += _warnings(shared, "of every test here")
    blocks = [
        Block(
            GATING_DETAILS if d.gating else DETAILS,
            partial(_test_details, d, frozenset(shared)),
            "test details",
        )
        for d in deltas
    ]
    return Section(blocks, head=head, tail="\n</details>\n")


def _shared_warnings(deltas: Sequence[TestDelta]) -> tuple[str, ...]:
    """Warnings every test of the suite carries (a server's, the geometry's): said once."""
    lists = [d.head.warnings for d in deltas if d.head is not None]
    if len(lists) < 2:
        return ()
    return tuple(w for w in lists[0] if all(w in other for other in lists[1:]))


def _engine_identity(server: ServerInfo) -> str:
    """What the server said it is (issue 31: which build and backend ran), when it said."""
    said = (("version", server.version), ("build", server.build), ("backend", server.backend))
    parts = [f"{label} {escape.code(value, 60)}" for label, value in said if value]
    return " · " + " · ".join(parts) if parts else ""


def _off_disk(arg: str) -> str:
    """An argument as the reader needs it: an absolute path on the runner's disk (the
    interpreter the server runs under, a model directory) is its last part."""
    if arg.startswith("/") and " " not in arg and len(arg) > 1:
        return "…/" + PurePosixPath(arg).name
    return arg


def _worth_details(test: TestResult) -> bool:
    nonzero = any(test.kl_per_sample or ())  # a float is true unless it is zero
    return bool(
        nonzero
        or test.first_divergence
        or test.message
        or test.warnings
        or passed_yet_differs(test)
        or test.status is not Status.PASSED
    )


MAX_SAMPLES_LISTED = 64


MAX_DIVERGENCES = 32


def _test_details(delta: TestDelta, shared: frozenset[str] = frozenset()) -> str:
    test = delta.head
    assert test is not None
    hits = f" · {_hits_detail(test.cache_hits)}" if test.cache_hits else ""
    parts = [
        f"\n#### {escape.text(test.id, 200)}\n\n"
        f"check {escape.code(test.check, 60)} · {test.status.value} · "
        f"avg KL {_kl_with_context(delta)}{hits} · {test.duration_s:.1f} s\n"
    ]
    if differs := passed_yet_differs(test):
        parts.append(f"\n{differs}\n")
    if test.message:
        parts.append("\n" + _message(test.message) + "\n")
    if test.hint:
        parts.append(f"\nWhat to do: {escape.text(test.hint, 600)}\n")
    if delta.knobs:
        parts.append(_knobs(delta.knobs))
    if test.facts and test.status is not Status.PASSED:
        parts.append(_facts(test.facts))
    own = [w for w in test.warnings if w not in shared]
    if own:
        parts.append(_warnings(own))
    if test.reach is not None and test.status is not Status.PASSED:
        parts.append(reach.details(test.reach))
    if delta.worse:
        parts.append(
            f"\nRed before too, but more than {WORSE_FACTOR:g}x worse than then, so it is "
            f"no pre-existing failure: {escape.text('; '.join(delta.worse), 600)}\n"
        )
    if test.noise_floor is not None:
        parts.append(_noise_floor(test))
    if delta.against_base is not None:
        parts.append(against_base.block(delta.against_base))
    if test.repeats is not None:
        parts.append(_repeats(test.repeats))
    if test.kl_per_sample:
        parts.append(_per_sample(test.kl_per_sample, test.kl_threshold, test.cache_hits))
    if test.first_divergence:
        parts.append(_divergences(test))
    return "".join(parts)


def _knobs(changes: Sequence[str]) -> str:
    """The test's server arguments and stated facts, changed against the base."""
    items = "".join(f"- {escape.text(change, 400)}\n" for change in changes[:MAX_FACTS])
    more = f"- … and {len(changes) - MAX_FACTS} more\n" if len(changes) > MAX_FACTS else ""
    return (
        "\nKnobs changed against the base (a dropped knob can disarm a test that stays "
        f"green):\n\n{items}{more}"
    )


def _facts(facts: Sequence[Fact]) -> str:
    """The facts the test states about its server, each as the server reported it (shown
    where they matter: a test that is not green)."""
    rows = [
        "\nServer facts the test states:\n\n| fact | expected | server reported | |\n"
        "|---|---|---|---|\n"
    ]
    for fact in facts[:MAX_FACTS]:
        said = MISSING if fact.reported is None else escape.code(fact.reported, 200)
        where = f" ({escape.text(fact.source, 80)})" if fact.source else ""
        mark = {"holds": "✅", "differs": "❌"}.get(fact.state.value, "❔ cannot tell")
        cells = [escape.code(fact.name, 120), escape.code(fact.expected, 200), said + where, mark]
        rows.append("| " + " | ".join(cells) + " |\n")
    if len(facts) > MAX_FACTS:
        rows.append(f"\n… and {len(facts) - MAX_FACTS} more facts\n")
    return "".join(rows)


MAX_FACTS = 20


def _noise_floor(test: TestResult) -> str:
    """The cache test's KL against its measured floor (the same prompts with no cache)."""
    floor = test.noise_floor
    assert floor is not None
    ratio = f" ({floor.ratio:.3g}x the floor)" if floor.ratio is not None else ""
    gate = (
        f"; gate noise-floor: fails above {floor.factor:g} x floor + {floor.margin:g}"
        if floor.gates
        else ""
    )
    return (
        f"\nNoise floor (the same prompts with no cache): avg KL {fmt_kl(floor.kl)}, "
        f"{floor.mismatched}/{floor.tokens} logprobs differ, largest difference "
        f"{_difference(floor.max_abs_diff)}; this test: avg KL {fmt_kl(test.kl_div)}{ratio}, "
        f"largest difference {_difference(test.max_abs_diff)}{gate}\n"
    )


def _difference(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _kl_with_context(delta: TestDelta) -> str:
    """Head KL, with the threshold and the base's KL when they are known."""
    assert delta.head is not None
    context = []
    if delta.head.kl_threshold is not None:
        context.append(f"threshold {fmt_kl(delta.head.kl_threshold)}")
    if delta.base is not None and delta.base.kl_div is not None:
        context.append(f"base {fmt_kl(delta.base.kl_div)}")
    suffix = f" ({', '.join(context)})" if context else ""
    return fmt_kl(delta.head.kl_div) + suffix


def _repeats(evidence: Repeats) -> str:
    """The flake meter's evidence: one row per repeat, and what changed between them."""
    launches = f" on {plural(evidence.launches, 'launch')}" if evidence.launches > 1 else ""
    verdict = "disagree" if not evidence.agree else "are bit-identical"
    head = (
        f"\nRepeats: {evidence.count}{launches} {verdict}: "
        f"{evidence.changed}/{evidence.positions} positions changed between repeats\n\n"
        "| repeat | status | avg KL | cache hits |\n|---|---|---|---|\n"
    )
    # The three lists are one per repeat when `run` writes them; a results file from
    # elsewhere may hold lists of other lengths (the schema cannot say "as long as"), and
    # a row then shows what is missing instead of the report crashing.
    rows = [
        f"| {n} | {MISSING if status is None else status.value} | {fmt_kl(kl)} | "
        f"{MISSING if hit is None else hit} |\n"
        for n, (status, kl, hit) in enumerate(
            itertools.zip_longest(evidence.statuses, evidence.kl, evidence.cache_hits), start=1
        )
    ]
    where = (
        f"\nFirst change: {escape.text(evidence.first_change, 400)}\n"
        if evidence.first_change
        else ""
    )
    return head + "".join(rows[:MAX_REPEATS_LISTED]) + where


MAX_REPEATS_LISTED = 20


def _message(message: str) -> str:
    """One line (every check's own message) as a paragraph, which wraps at the comment's
    width; lines (a server log's tail) as a block, which keeps them."""
    if "\n" not in message.strip("\n"):
        return escape.text(message, 2000)
    return escape.block(message, 2000)


def _warnings(warnings: Sequence[str], whose: str = "") -> str:
    """A test's warnings, folded under it (a long list was taller than the failure)."""
    items = "".join(f"- ⚠️ {escape.text(w, 400)}\n" for w in warnings[:MAX_WARNINGS])
    summary = plural(len(warnings), "warning") + (f" {whose}" if whose else "")
    return f"\n<details><summary>{summary}</summary>\n\n{items}\n</details>\n"


MAX_WARNINGS = 10


def _per_sample(values: Sequence[float], threshold: float | None, hits: CacheHits | None) -> str:
    nonzero = sum(1 for value in values if shown_kl(value) != 0)
    # A cache check compares the samples that hit: say so beside the test's own count.
    of = f" that hit the cache (of {hits.total})" if hits and hits.total > len(values) else ""
    if not nonzero:
        return f"\nKL per sample: 0 in all {plural(len(values), 'sample')}{of}\n"
    listed = " · ".join(fmt_kl(value) for value in values[:MAX_SAMPLES_LISTED])
    more = (
        f" · … {len(values) - MAX_SAMPLES_LISTED} more" if len(values) > MAX_SAMPLES_LISTED else ""
    )
    counted = f"{plural(len(values), 'sample')}{of}, {nonzero} nonzero"
    text = f"\nKL per sample ({counted}): {listed}{more}\n"
    chart = charts.per_sample_kl(values, threshold)
    return text + ("\n" + chart if chart else "")


def _divergences(test: TestResult) -> str:
    rows = [
        "\nFirst divergence of each differing sample:\n\n"
        "| sample | token | cached tokens | decode logprob | replay logprob | replay - decode |\n"
        "|---|---|---|---|---|---|\n"
    ]
    for item in test.first_divergence[:MAX_DIVERGENCES]:
        cells = [
            str(item.sample),
            str(item.token_index),
            MISSING if item.cached_tokens is None else str(item.cached_tokens),
            _logprob(item.decode_logprob),
            _logprob(item.replay_logprob),
            _replay_minus_decode(item.decode_logprob, item.replay_logprob),
        ]
        rows.append("| " + " | ".join(cells) + " |\n")
    hidden = len(test.first_divergence) - MAX_DIVERGENCES
    if hidden > 0:
        rows.append(f"\n… and {hidden} more differing samples\n")
    first = test.first_divergence[0]
    if first.hint:  # once per test: the rows' hints differ only in their positions
        where = escape.text(_whole_words(first.hint, MAX_HINT), MAX_HINT + 1)
        rows.append(f"\nSample {first.sample}: {where}\n")
    return "".join(rows)


MAX_HINT = 600


def _whole_words(text: str, limit: int) -> str:
    """At most `limit` characters, cut between words (never mid-word) with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut).rstrip(" ;,") + ELLIPSIS


def _logprob(value: float | None) -> str:
    # 6 significant digits to read; the difference column shows what the digits hide (a
    # one-ulp difference is +4.44e-16 there).
    return MISSING if value is None else f"{value:.6g}"


def _replay_minus_decode(decode: float | None, replay: float | None) -> str:
    if decode is None or replay is None:
        return MISSING
    return f"{replay - decode:+.2e}"

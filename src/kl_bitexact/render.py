"""A Comparison as the PR comment, the job summary and workflow annotations (pure).

The comment answers at a glance whether anything regressed, what changed against the
base branch, which red is expected and whether the merge is gated; the details below
let a reviewer drill down. Every string that comes from results is untrusted and goes
through `escape`; the comment is fitted into GitHub's 65,536-character limit by
`budget`, which drops details first and never the headline or a gating row.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kl_bitexact import __version__, charts, escape
from kl_bitexact.blockers import effective_state
from kl_bitexact.budget import KEEP, Block, Section, fit
from kl_bitexact.compare import Blocker, Comparison, TestDelta, Transition
from kl_bitexact.errors import ExitCode
from kl_bitexact.findings import Finding
from kl_bitexact.gate import SEVERITY, Verdict
from kl_bitexact.results import CacheHits, ExactMatch, Status, TestResult

COMMENT_LIMIT = 65_536  # GitHub rejects longer issue comments
SUMMARY_LIMIT = 1_000_000  # the job summary allows 1 MiB per step
NOTICE_RESERVE = 800  # room kept for the "what was cut" notice
DEFAULT_KEY = "kl-bitexact"

# Tiers of the budget, filled in this order: only the headline and footer are KEEP;
# gating rows come right after, so they are cut only if they alone overflow. Details are
# trimmed first, except the drill-down of gating tests (their first divergences), which
# a reviewer needs more than the rows of passing tests.
GATING, ATTENTION, NOTES, GATING_DETAILS, OTHER_ROWS, DETAILS = 1, 2, 3, 4, 5, 6

_ICON = {
    Verdict.REGRESSION: "🔴",
    Verdict.INFRA: "⚠️",
    Verdict.UNKNOWN: "❓",
    Verdict.STALE_MARKER: "🧹",
    Verdict.EXPECTED_RED: "🟠",
    Verdict.UNEXPECTED_GREEN: "🟡",
    Verdict.UNBLOCKED: "🔓",
    Verdict.SKIPPED: "⏭️",
    Verdict.OK: "✅",
}
_LABEL = {
    Verdict.REGRESSION: "regression",
    Verdict.INFRA: "did not measure",
    Verdict.UNKNOWN: "blocker unknown",
    Verdict.STALE_MARKER: "stale marker",
    Verdict.EXPECTED_RED: "expected red",
    Verdict.UNEXPECTED_GREEN: "unexpected green",
    Verdict.UNBLOCKED: "unblocked",
    Verdict.SKIPPED: "skipped",
    Verdict.OK: "ok",
}
_TRANSITION = {
    Transition.REGRESSED: "regressed",
    Transition.NEWLY_NOT_RUN: "newly not run",
    Transition.STILL_FAILING: "still failing (red on base too)",
    Transition.FIXED: "fixed",
    Transition.NEW: "new",
    Transition.REMOVED: "removed",
    Transition.UNCHANGED: "unchanged",
    Transition.NO_BASE: "no base",
}
_REMOVED_RANK = SEVERITY[Verdict.SKIPPED]
MISSING = "-"  # a value the test did not produce
_SAFE_URL = re.compile(r"^https?://[A-Za-z0-9\-._~:/?#@!$&*+,;=%]+$")
_SAFE_KEY = re.compile(r"[^\w.\-/ ()]")


@dataclass(frozen=True)
class Links:
    """Where the full run lives, when the environment says (GitHub Actions does)."""

    run: str | None = None
    artifact: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Links:
        env = os.environ if env is None else env
        server, repo = env.get("GITHUB_SERVER_URL"), env.get("GITHUB_REPOSITORY")
        run_id = env.get("GITHUB_RUN_ID")
        run = f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None
        return cls(_safe_url(run), _safe_url(env.get("KL_BITEXACT_ARTIFACT_URL")))


def _safe_url(url: str | None) -> str | None:
    return url if url and _SAFE_URL.match(url) else None


def marker(key: str) -> str:
    """The hidden marker that finds the sticky comment again (`--`, `>` cannot end it)."""
    return f"<!-- kl-bitexact:{_SAFE_KEY.sub('_', key).replace('--', '-_')} -->"


# --- entry points -----------------------------------------------------------------------


def comment(
    comparison: Comparison,
    *,
    key: str = DEFAULT_KEY,
    findings: Sequence[Finding] = (),
    links: Links | None = None,
    budget: int | None = COMMENT_LIMIT,
) -> str:
    """The sticky PR comment: starts with the marker, fits `budget` (None: no limit)."""
    mark = marker(key) + "\n"
    room = None if budget is None else budget - len(mark)
    return mark + document(comparison, findings, links or Links(), room)


def job_summary(
    comparison: Comparison,
    *,
    findings: Sequence[Finding] = (),
    links: Links | None = None,
    budget: int | None = SUMMARY_LIMIT,
) -> str:
    """The Markdown for `$GITHUB_STEP_SUMMARY`: the same report with a larger budget."""
    return document(comparison, findings, links or Links(), budget)


def document(
    comparison: Comparison, findings: Sequence[Finding], links: Links, budget: int | None
) -> str:
    sections = _sections(comparison, findings, links)
    texts, cut = fit(sections, None if budget is None else budget - NOTICE_RESERVE)
    if cut:
        texts.insert(1, _cut_notice(cut, links))
    return "".join(texts)


def _sections(comparison: Comparison, findings: Sequence[Finding], links: Links) -> list[Section]:
    attention, others = _split_rows(comparison.deltas)
    return [
        Section([Block(KEEP, partial(_headline, comparison, links))]),
        _attention_table(attention),
        _blocked_section(comparison),
        _warnings_section(comparison.deltas),
        _findings_section(findings),
        _other_rows(others),
        *_details_sections(comparison),
        Section([Block(KEEP, partial(_footer, comparison))]),
    ]


# --- headline ---------------------------------------------------------------------------


def _headline(comparison: Comparison, links: Links) -> str:
    decision = comparison.decision
    could_not_run = decision.exit_code is ExitCode.COULD_NOT_RUN
    icon = "⚠️" if could_not_run or decision.report_only else "✅" if decision.passed else "❌"
    why = f": {', '.join(decision.reasons)}" if decision.reasons else ""
    lines = [
        f"## {icon} kl-bitexact: {decision.label}{why}",
        "",
        _counts_line(comparison),
        _base_line(comparison),
        _policy_line(comparison, links),
    ]
    return "\n".join(lines) + "\n"


def _counts_line(comparison: Comparison) -> str:
    counts = comparison.verdicts
    total = sum(counts.values())
    parts = [
        f"{_ICON[verdict]} {_count(verdict, counts[verdict])}"
        for verdict in Verdict
        if counts[verdict]
    ]
    suites = comparison.suite_count
    head = f"**{plural(total, 'test')}** in {plural(suites, 'suite')}"
    return " · ".join([head, *parts]) + "  "


def _count(verdict: Verdict, count: int) -> str:
    if verdict in (Verdict.REGRESSION, Verdict.STALE_MARKER):
        return plural(count, _LABEL[verdict])
    return f"{count:,} {_LABEL[verdict]}"


def _base_line(comparison: Comparison) -> str:
    baseline = comparison.baseline
    if baseline.results is None:
        return f"⚠️ baseline unavailable: {escape.text(baseline.unavailable, 300)}  "
    transitions = comparison.transitions
    parts = [
        f"{transitions[t]:,} {_TRANSITION[t]}"
        for t in Transition
        if transitions[t] and t != Transition.NO_BASE
    ]
    commit = baseline.results.run.commit
    against = f" {escape.code(commit[:12])}" if commit else ""
    return f"Against base{against}: " + " · ".join(parts or ["no tests on either side"]) + "  "


def _policy_line(comparison: Comparison, links: Links) -> str:
    policy = comparison.policy
    parts = [f"fails on {policy.fail_on.value}"]
    if policy.strict:
        parts.append("strict: unexpected green gates")
    if not comparison.blockers_resolved and any(d.blockers for d in comparison.deltas):
        parts.append("blocker states not resolved (pass `--blockers`): treated as unknown")
    parts.extend(_link_parts(links))
    return "Gate " + " · ".join(parts)


def _link_parts(links: Links) -> list[str]:
    parts = []
    if links.run:
        parts.append(f"[run and job summary]({links.run})")
    if links.artifact:
        parts.append(f"[results artifact]({links.artifact})")
    return parts


def _cut_notice(cut: Counter[str], links: Links) -> str:
    what = ", ".join(f"{label}: {count:,}" for label, count in sorted(cut.items()))
    where = (
        " and ".join(_link_parts(links)) or "`kl-bitexact report RESULTS.json --full --out FILE`"
    )
    return (
        f"\n> ✂️ Trimmed to fit GitHub's size limit. Left out: {what}. The full report: {where}.\n"
    )


def _footer(comparison: Comparison) -> str:
    tool = comparison.head.tool
    version = escape.text(tool.version, 40)
    return f"\n<sub>kl-bitexact {__version__} · results written by {version}</sub>\n"


# --- the table --------------------------------------------------------------------------

_TABLE_HEAD = (
    "|  | suite | test | avg KL | Δ KL | differing logprobs | cache hits | status |\n"
    "|---|---|---|---|---|---|---|---|\n"
)


def _split_rows(deltas: Iterable[TestDelta]) -> tuple[list[TestDelta], list[TestDelta]]:
    attention: list[TestDelta] = []
    others: list[TestDelta] = []
    for delta in deltas:
        (attention if _needs_attention(delta) else others).append(delta)
    attention.sort(key=lambda d: (not d.gating, _rank(d)))
    return attention, others


def _needs_attention(delta: TestDelta) -> bool:
    if delta.transition in (Transition.REMOVED, Transition.NEWLY_NOT_RUN):
        return True
    return delta.verdict not in (Verdict.OK, Verdict.SKIPPED)


def _rank(delta: TestDelta) -> int:
    return _REMOVED_RANK if delta.verdict is None else SEVERITY[delta.verdict]


def _attention_table(rows: Sequence[TestDelta]) -> Section:
    blocks = [
        Block(
            GATING if d.gating else ATTENTION, partial(_row, d), "rows of tests needing attention"
        )
        for d in rows
    ]
    return Section(blocks, head="\n### Needs attention\n\n" + _TABLE_HEAD)


def _other_rows(rows: Sequence[TestDelta]) -> Section:
    blocks = [Block(OTHER_ROWS, partial(_row, d), "rows of passing or skipped tests") for d in rows]
    summary = f"{plural(len(rows), 'passing or skipped test')}"
    head = f"\n<details><summary>{summary}</summary>\n\n" + _TABLE_HEAD
    return Section(blocks, head=head, tail="\n</details>\n")


def _row(delta: TestDelta) -> str:
    test = delta.head or delta.base
    assert test is not None  # a delta has at least one side
    head, base = delta.head, delta.base
    cells = [
        _ICON[delta.verdict] if delta.verdict else "🗑️",
        escape.text(delta.suite, 80),
        escape.code(delta.id, 160),
        fmt_kl(head.kl_div) if head else MISSING,
        _kl_change_cell(delta),
        _exact_cell(head.exact if head else None, base.exact if base else None),
        _hits_cell(head.cache_hits if head else None, base.cache_hits if base else None),
        _status_cell(delta),
    ]
    return "| " + " | ".join(cells) + " |\n"


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fmt_kl(value: float | None) -> str:
    """Exact zero as `0` (bit-exact is the point), anything else in 3 significant digits."""
    if value is None:
        return MISSING
    return "0" if value == 0 else f"{value:.2e}"


def _kl_change_cell(delta: TestDelta) -> str:
    change = delta.kl_change
    if change is None:
        return _TRANSITION[delta.transition] if delta.transition is Transition.NEW else MISSING
    return "0" if change == 0 else f"{change:+.2e}"


def _exact_cell(head: ExactMatch | None, base: ExactMatch | None) -> str:
    if head is None:
        return MISSING
    now = f"{head.mismatched}/{head.tokens}"
    if base is None or base.mismatched == head.mismatched:
        return now
    return f"{base.mismatched} → {now}"


def _hits_cell(head: CacheHits | None, base: CacheHits | None) -> str:
    if head is None:
        return MISSING
    predicted = f", predicted {head.expected}" if head.expected is not None else ""
    now = f"{head.hit}/{head.total} (min {head.min_ratio:g}{predicted})"
    if base is None or base.hit == head.hit:
        return now
    return f"{base.hit} → {now}"


def _status_cell(delta: TestDelta) -> str:
    label = _LABEL[delta.verdict] if delta.verdict else "removed"
    parts = [f"**{label}**" if delta.gating else label]
    if delta.head is not None and delta.head.status.value != label:
        parts.append(delta.head.status.value)
    if delta.transition not in (Transition.UNCHANGED, Transition.NO_BASE, Transition.REMOVED):
        parts.append(_TRANSITION[delta.transition])
    if delta.gating:
        parts.append("gates the merge")
    return " · ".join(parts)


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
        measured=_measured(delta.head),
    )
    test = f"{escape.code(delta.id, 160)} ({escape.text(delta.suite, 80)})"
    return f"- {_ICON[delta.verdict]} {test}: {sentence}\n"


def _refs(blockers: Sequence[Blocker]) -> str:
    """One reference plainly; several with the state of each, since they may differ."""
    if len(blockers) == 1:
        return _ref(blockers[0])
    return ", ".join(f"{_ref(b)} ({b.state.value})" for b in blockers)


def _ref(blocker: Blocker) -> str:
    # A canonical ref only has [\w.-/#] characters: written plainly so GitHub links it.
    if blocker.ref is not None:
        return blocker.ref
    return f"{escape.code(blocker.text, 120)} (unresolvable reference)"


def _measured(test: TestResult) -> str:
    measured = f"measured {fmt_kl(test.kl_div)}"
    if test.exact is not None and test.exact.mismatched:
        measured += f", {test.exact.mismatched}/{test.exact.tokens} logprobs differ"
    return measured


_BLOCKED_SENTENCE = {
    Verdict.EXPECTED_RED: "expected red until {refs} merges - {state}; {measured}",
    Verdict.UNEXPECTED_GREEN: "green although {refs} is still open - check that the "
    "test still detects the bug, or remove the marker; {measured}",
    Verdict.REGRESSION: "{refs} merged but this test is still red; {measured}",
    Verdict.UNBLOCKED: "{refs} merged and the test is green: remove the `blocked_by` marker",
    Verdict.STALE_MARKER: "{refs} was closed without merging: update or remove the "
    "marker; {measured}",
    Verdict.UNKNOWN: "state of {refs} is unknown (GitHub could not tell, or blockers were "
    "not resolved); {measured}",
    Verdict.INFRA: "blocked by {refs}, but the check did not measure; {measured}",
    Verdict.SKIPPED: "blocked by {refs}; skipped",
    Verdict.OK: "blocked by {refs}; {measured}",
}


def _warnings_section(deltas: Sequence[TestDelta]) -> Section:
    by_text: dict[str, list[str]] = {}
    for delta in deltas:
        for warning in delta.head.warnings if delta.head else ():
            by_text.setdefault(warning, []).append(delta.id)
    blocks = [
        Block(NOTES, partial(_warning_item, text, ids), "warnings") for text, ids in by_text.items()
    ]
    return Section(blocks, head="\n### Warnings\n\n")


def _warning_item(warning: str, ids: Sequence[str]) -> str:
    names = ", ".join(escape.code(test_id, 80) for test_id in ids[:3])
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return f"- ⚠️ {escape.text(warning, 400)} ({names}{more})\n"


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
    for delta in comparison.deltas:
        if delta.head is not None and _worth_details(delta.head):
            by_suite.setdefault(delta.suite, []).append(delta)
    servers = {suite.name: suite.server for suite in comparison.head.suites}
    sections = []
    for name, deltas in by_suite.items():
        server = servers[name]
        args = " ".join(server.args)
        summary = f"Details: {escape.text(name, 80)} ({plural(len(deltas), 'test')})"
        head = (
            f"\n<details><summary>{summary}</summary>\n\n"
            f"Server: {escape.code(server.engine, 40)} {escape.code(args, 600) if args else ''}\n"
        )
        blocks = [
            Block(
                GATING_DETAILS if d.gating else DETAILS, partial(_test_details, d), "test details"
            )
            for d in deltas
        ]
        sections.append(Section(blocks, head=head, tail="\n</details>\n"))
    return sections


def _worth_details(test: TestResult) -> bool:
    nonzero = any(test.kl_per_sample)  # a float is true unless it is zero
    return bool(
        nonzero or test.first_divergence or test.message or test.status is not Status.PASSED
    )


MAX_SAMPLES_LISTED = 64
MAX_DIVERGENCES = 32


def _test_details(delta: TestDelta) -> str:
    test = delta.head
    assert test is not None
    parts = [
        f"\n#### {escape.text(test.id, 200)}\n\n"
        f"check {escape.code(test.check, 60)} · {test.status.value} · "
        f"avg KL {_kl_with_context(delta)} · {test.duration_s:.1f} s\n"
    ]
    if test.message:
        parts.append("\n" + escape.block(test.message, 2000) + "\n")
    if test.kl_per_sample:
        parts.append(_per_sample(test.kl_per_sample))
    if test.first_divergence:
        parts.append(_divergences(test))
    return "".join(parts)


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


def _per_sample(values: Sequence[float]) -> str:
    nonzero = sum(1 for value in values if value != 0)
    if not nonzero:
        return f"\nKL per sample: 0 in all {plural(len(values), 'sample')}\n"
    listed = " · ".join(fmt_kl(value) for value in values[:MAX_SAMPLES_LISTED])
    more = (
        f" · … {len(values) - MAX_SAMPLES_LISTED} more" if len(values) > MAX_SAMPLES_LISTED else ""
    )
    text = f"\nKL per sample ({len(values)} samples, {nonzero} nonzero): {listed}{more}\n"
    chart = charts.per_sample_kl(values)
    return text + ("\n" + chart if chart else "")


def _divergences(test: TestResult) -> str:
    rows = [
        "\nFirst divergence of each differing sample:\n\n"
        "| sample | token | cached tokens | decode logprob | replay logprob | hint |\n"
        "|---|---|---|---|---|---|\n"
    ]
    for item in test.first_divergence[:MAX_DIVERGENCES]:
        cells = [
            str(item.sample),
            str(item.token_index),
            MISSING if item.cached_tokens is None else str(item.cached_tokens),
            _logprob(item.decode_logprob),
            _logprob(item.replay_logprob),
            escape.text(item.hint, 200),
        ]
        rows.append("| " + " | ".join(cells) + " |\n")
    hidden = len(test.first_divergence) - MAX_DIVERGENCES
    if hidden > 0:
        rows.append(f"\n… and {hidden} more differing samples\n")
    return "".join(rows)


def _logprob(value: float | None) -> str:
    # repr: the shortest text that round-trips, so a one-ulp difference shows.
    return MISSING if value is None else repr(value)


# --- annotations ------------------------------------------------------------------------

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 of each level per step


def workflow_commands(comparison: Comparison) -> list[str]:
    """Workflow commands (`::error title=...::message`) for the tests that matter."""
    by_level: dict[str, list[TestDelta]] = {"error": [], "warning": [], "notice": []}
    for delta in comparison.deltas:
        level = _level(delta)
        if level:
            by_level[level].append(delta)
    lines: list[str] = []
    for level, deltas in by_level.items():
        lines.extend(_annotation(level, d) for d in deltas[: MAX_ANNOTATIONS - 1])
        if len(deltas) >= MAX_ANNOTATIONS:
            rest = len(deltas) - (MAX_ANNOTATIONS - 1)
            lines.append(_command(level, "kl-bitexact", f"{rest} more; see the job summary"))
    return lines


def _level(delta: TestDelta) -> str | None:
    if delta.gating:
        return "error"
    if delta.verdict in (Verdict.UNEXPECTED_GREEN, Verdict.STALE_MARKER, Verdict.UNKNOWN):
        return "warning"
    if delta.verdict is Verdict.UNBLOCKED or delta.transition is Transition.NEWLY_NOT_RUN:
        return "notice"
    return None


def _annotation(level: str, delta: TestDelta) -> str:
    assert delta.verdict is not None
    test = delta.head
    detail = test.message if test and test.message else _measured(test) if test else ""
    title = f"kl-bitexact {_LABEL[delta.verdict]}: {delta.suite} {delta.id}"
    return _command(level, escape.clip(title, 200), escape.clip(detail, 1000))


def _command(level: str, title: str, message: str) -> str:
    return f"::{level} title={escape.command_property(title)}::{escape.command_data(message)}"


# --- machine-readable verdict -----------------------------------------------------------


def as_json(comparison: Comparison) -> dict[str, Any]:
    """The verdict for downstream steps (`kl-bitexact report --json`).

    `verdict` is `passed`, `failed` or `could_not_run`; `exit_code` is what the command
    returns; `tests` lists every test id with its verdict, transition and whether it gates.
    """
    decision, baseline = comparison.decision, comparison.baseline
    return {
        "verdict": decision.verdict,
        "headline": decision.label,
        "passed": decision.passed,
        "exit_code": int(decision.exit_code),
        "reasons": list(decision.reasons),
        "policy": {
            "fail_on": comparison.policy.fail_on.value,
            "strict": comparison.policy.strict,
            "allow_unknown": comparison.policy.allow_unknown,
        },
        "baseline": {
            "available": baseline.results is not None,
            "reason": baseline.unavailable if baseline.results is None else None,
        },
        "counts": {v.value: n for v, n in comparison.verdicts.items()},
        "transitions": {t.value: n for t, n in comparison.transitions.items()},
        "tests": [_test_json(d) for d in comparison.deltas],
    }


def _test_json(delta: TestDelta) -> dict[str, Any]:
    head, base = delta.head, delta.base
    return {
        "suite": delta.suite,
        "id": delta.id,
        "status": head.status.value if head else None,
        "verdict": delta.verdict.value if delta.verdict else None,
        "transition": delta.transition.value,
        "gating": delta.gating,
        "kl_div": head.kl_div if head else None,
        "base_kl_div": base.kl_div if base else None,
        "blocked_by": {b.ref or b.text: b.state.value for b in delta.blockers},
    }

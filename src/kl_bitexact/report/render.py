"""A Comparison as the PR comment, the job summary and workflow annotations (pure).

The comment answers at a glance whether anything regressed, what changed against the
base branch, which red is expected and whether the merge is gated; the details below
let a reviewer drill down (the body is built in `sections`). Every string that comes
from results is untrusted and goes through `escape`; the comment is fitted into GitHub's
65,536-character limit by `budget`, which drops details first and never the headline or
a gating row.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kl_bitexact import __version__
from kl_bitexact.compare import states
from kl_bitexact.compare.comparison import Comparison, TestDelta, Transition
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.errors import ExitCode
from kl_bitexact.report import against_base, causes, proofs, sections
from kl_bitexact.report.budget import KEEP, Block, Section, fit, utf8_size
from kl_bitexact.report.marker import DEFAULT_KEY
from kl_bitexact.report.wording import measured
from kl_bitexact.results.formats import plural
from kl_bitexact.results.model import ServerInfo
from kl_bitexact.untrusted import escape

if TYPE_CHECKING:  # findings are read by `report --findings`; `run` renders none
    from kl_bitexact.registry.findings_file import Finding

COMMENT_LIMIT = 65_536  # GitHub rejects longer issue comments


SUMMARY_LIMIT = 1_000_000  # bytes of UTF-8: GitHub cuts a step's job summary at 1 MiB


NOTICE_RESERVE = 800  # room kept for the "what was cut" notice


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
    """The Markdown for `$GITHUB_STEP_SUMMARY`: the same report with a larger budget, in
    bytes (GitHub's limit is of bytes; the comment's is of characters)."""
    return document(comparison, findings, links or Links(), budget, measure=utf8_size)


def document(
    comparison: Comparison,
    findings: Sequence[Finding],
    links: Links,
    budget: int | None,
    measure: Callable[[str], int] = len,
) -> str:
    sections = _sections(comparison, findings, links)
    texts, cut = fit(sections, None if budget is None else budget - NOTICE_RESERVE, measure)
    if cut:
        texts.insert(1, _cut_notice(cut, links))
    return "".join(texts)


def _sections(comparison: Comparison, findings: Sequence[Finding], links: Links) -> list[Section]:
    return [
        Section([Block(KEEP, partial(_headline, comparison, links))]),
        *sections.body(comparison, findings),
        Section([Block(KEEP, partial(_footer, comparison))]),
    ]


# --- headline ---------------------------------------------------------------------------


def _headline(comparison: Comparison, links: Links) -> str:
    decision = comparison.decision
    could_not_run = decision.exit_code is ExitCode.COULD_NOT_RUN
    # Could not run blocks the merge like a red gate (exit 2): never a warning's icon.
    icon = (
        "⛔"
        if could_not_run
        else "⚠️"
        if decision.report_only
        else "✅"
        if decision.passed
        else "❌"
    )
    unmeasured = causes.unmeasured(comparison.deltas)
    why = f": {', '.join(decision.reasons)}" if decision.reasons else ""
    cause_lines = None
    if unmeasured is not None and could_not_run and not decision.red:
        # The cause once, in the headline: the gate failed on nothing the change did.
        why = f": {causes.headline(unmeasured)}"
        cause_lines = causes.block(unmeasured, links.artifact)
    elif unmeasured is not None:
        cause_lines = causes.block(unmeasured, links.artifact)
    lines = [
        f"## {icon} kl-bitexact: {decision.label}{why}",
        "",
        _judged_line(comparison, links),
        _counts_line(comparison),
        proofs.headline(comparison),
        _base_line(comparison),
        _policy_line(comparison),
        cause_lines,
    ]
    return "\n".join(line for line in lines if line is not None) + "\n"


def _judged_line(comparison: Comparison, links: Links) -> str:
    """What was judged: base -> head, the engine as its server reported it, the run."""
    head, results = comparison.head.run.commit, comparison.baseline.results
    base = "no base" if results is None else _sha(results.run.commit, "base")
    commits = f"{base} → {_sha(head, 'head')}"

    parts = [f"Judged {commits}", _engines(comparison), *_link_parts(links)]
    return " · ".join(parts) + "  "


def _sha(commit: str | None, which: str) -> str:
    return escape.code(commit[:12]) if commit else f"{which} commit unknown"


def _engines(comparison: Comparison) -> str:
    said = dict.fromkeys(_engine(suite.server) for suite in comparison.head.suites)
    return "engine " + ", ".join(said) if said else "no engine ran"


def _engine(server: ServerInfo) -> str:
    """`sglang 0.5.3 (build abc1234, backend fa3)` as the server said it, or that it did not."""
    named = escape.code(server.engine, 40)
    if not server.version:
        return f"{named} (version not reported)"
    extra = [
        f"{label} {escape.code(value, 60)}"
        for label, value in (("build", server.build), ("backend", server.backend))
        if value
    ]
    return f"{named} {escape.code(server.version, 60)}" + (
        f" ({', '.join(extra)})" if extra else ""
    )


def _counts_line(comparison: Comparison) -> str:
    found = states.tally(comparison.state(d) for d in comparison.deltas)
    parts = [f"{states.WORDS[kind].icon} {states.counted(kind, count)}" for kind, count in found]
    total = sum(count for kind, count in found if kind is not states.Kind.REMOVED)
    head = f"**{plural(total, 'test')}** in {plural(comparison.suite_count, 'suite')}"
    return " · ".join([head, *parts]) + "  "


def _base_line(comparison: Comparison) -> str:
    baseline = comparison.baseline
    if baseline.results is None:
        return f"⚠️ baseline unavailable: {escape.text(baseline.unavailable, 300)}  "
    moved = Counter(states.against_base(d) for d in comparison.deltas)
    parts = [f"{moved[word]:,} {word}" for word in states.AGAINST_BASE if moved[word]]
    return "Against base: " + " · ".join(parts or ["no tests on either side"]) + "  "


def _policy_line(comparison: Comparison) -> str:
    policy = comparison.policy
    parts = [f"fails on {policy.fail_on_text}"]
    if policy.strict:
        parts.append("strict: unexpected green gates")
    if policy.proof_strict and comparison.proofs is not None:
        parts.append("proof strict: a new test green on base gates")
    if not policy.flaky and comparison.verdicts[Verdict.FLAKY]:
        # The one flaky policy, said where it applies (docs/suites.md, flake meter).
        parts.append("a flaky test gates only if a repeat was red (always with ,flaky)")
    if not comparison.blockers_resolved and any(d.blockers for d in comparison.deltas):
        parts.append("blocker states not resolved (pass `--blockers`): treated as unknown")
    return "Gate " + " · ".join(parts) + "  "


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


# --- annotations ------------------------------------------------------------------------


MAX_ANNOTATIONS = 10  # GitHub shows at most 10 of each level per step


def workflow_commands(comparison: Comparison) -> list[str]:
    """Workflow commands (`::error title=...::message`) for the tests that matter; tests
    in one state for one reason are one command (`8 tests: ...`), not eight alike."""
    by_level: dict[str, dict[tuple[str, str], list[TestDelta]]] = {
        "error": {},
        "warning": {},
        "notice": {},
    }
    for delta in comparison.deltas:
        level = _level(delta)
        if level:
            said = (comparison.state(delta).text(), _annotation_detail(delta))
            by_level[level].setdefault(said, []).append(delta)
    lines: list[str] = []
    for level, groups in by_level.items():
        items = list(groups.items())
        lines.extend(
            _annotation(level, said, deltas) for said, deltas in items[: MAX_ANNOTATIONS - 1]
        )
        if len(items) >= MAX_ANNOTATIONS:
            rest = sum(len(deltas) for _, deltas in items[MAX_ANNOTATIONS - 1 :])
            lines.append(
                _command(level, "kl-bitexact", f"{plural(rest, 'more test')}; see the job summary")
            )
    return lines


def _level(delta: TestDelta) -> str | None:
    if delta.gating:
        return "error"
    if delta.verdict in (Verdict.UNEXPECTED_GREEN, Verdict.STALE_MARKER, Verdict.UNKNOWN):
        return "warning"
    if delta.verdict is Verdict.UNBLOCKED or delta.transition is Transition.NEWLY_NOT_RUN:
        return "notice"
    return None


def _annotation_detail(delta: TestDelta) -> str:
    test = delta.head
    if test is None:
        return ""
    return test.message if test.message else measured(test)


def _annotation(level: str, said: tuple[str, str], deltas: Sequence[TestDelta]) -> str:
    state, detail = said
    first = deltas[0]
    tests = f"{first.suite} {first.id}" if len(deltas) == 1 else plural(len(deltas), "test")
    title = f"kl-bitexact {state}: {tests}"
    if len(deltas) > 1:
        detail = f"{', '.join(d.id for d in deltas[:5])}{' …' if len(deltas) > 5 else ''}: {detail}"
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
            "flaky": comparison.policy.flaky,
            "proof_strict": comparison.policy.proof_strict,
            "allow_known": comparison.policy.allow_known,
        },
        "baseline": {
            "available": baseline.results is not None,
            "reason": baseline.unavailable if baseline.results is None else None,
        },
        "counts": {v.value: n for v, n in comparison.verdicts.items()},
        "transitions": {t.value: n for t, n in comparison.transitions.items()},
        "tests": [_test_json(d, comparison.state(d)) for d in comparison.deltas],
        "proof": proofs.outcomes_json(comparison.proofs),
    }


def _test_json(delta: TestDelta, state: states.State) -> dict[str, Any]:
    head, base = delta.head, delta.base
    return {
        "suite": delta.suite,
        "id": delta.id,
        # The test's state in the words of the comment and the terminal (compare/states.py).
        "state": state.kind.value,
        "state_text": state.text(),
        "status": head.status.value if head else None,
        "verdict": delta.verdict.value if delta.verdict else None,
        "transition": delta.transition.value,
        "gating": delta.gating,
        "kl_div": head.kl_div if head else None,
        "base_kl_div": base.kl_div if base else None,
        "blocked_by": {b.ref or b.text: b.state.value for b in delta.blockers},
        # Against the base branch's history (null without one): new, known or unseen.
        "history": delta.standing.value if delta.standing else None,
        "known_let_through": delta.known_let_through,
        # A cache test against the base's own numbers (null: not a cache test, or nothing
        # measured): floor, cache KL, ratio on both sides, determinism, the finding.
        "against_base": against_base.as_json(delta.against_base),
    }

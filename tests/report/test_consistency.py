"""One story per comment (issue 37): the headline, the counts line, the base line, the status
column, the annotations and the terminal say the same thing about every test, in every outcome.

Each outcome (the golden scenarios and the six the issue names) is rendered and read back as a
reader would: every part is parsed on its own, and any two that disagree fail the test.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pytest
from golden_scenarios import Scenario, all_scenarios

from kl_bitexact.compare import states
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.report import render, terminal

BY_LENGTH = sorted(
    ((word, kind) for kind, w in states.WORDS.items() for word in {w.one, w.many}),
    key=lambda item: -len(item[0]),
)


def kind_of(text: str) -> states.Kind:
    """The state a piece of text starts with (the longest word that fits)."""
    for word, kind in BY_LENGTH:
        if text.startswith(word):
            return kind
    raise AssertionError(f"{text!r} is in no state's words")


def counted(text: str) -> tuple[states.Kind, int]:
    """`2 regressions` -> (REGRESSION, 2)."""
    number, words = text.split(" ", 1)
    return kind_of(words), int(number.replace(",", ""))


@dataclass(frozen=True)
class Read:
    """What each part of one comment says, parsed on its own."""

    headline: Counter[states.Kind]
    counts: Counter[states.Kind]
    rows: Counter[states.Kind]
    gating_rows: Counter[states.Kind]
    base_total: int | None
    base_words: tuple[str, ...]
    icons: tuple[tuple[str, states.Kind], ...]


def read(body: str) -> Read:
    lines = body.splitlines()
    headline = Counter[states.Kind]()
    title = lines[1]
    cause = re.match(
        r"## ⛔ kl-bitexact: could not run: .* \((\d+) tests?(?:; (\d+) more.*)?\)$", title
    )
    if cause:  # the cause in place of the reasons: every test of it could not run
        headline[states.Kind.COULD_NOT_RUN] = sum(int(n) for n in cause.groups() if n)
    elif m := re.match(r"## \S+ kl-bitexact: (?:gate failed|could not run)[^:]*: (.*)$", title):
        for part in m.group(1).split(", "):
            if part.startswith(("no test executed", "all skipped", "not run", "or no tests")):
                continue  # the run's own reason, of no test
            if "not shown to detect" in part:
                continue  # the proof's, of new tests (report/proofs.py)
            kind, n = counted(part)
            headline[kind] += n
    [counts_line] = [line for line in lines if re.match(r"\*\*[\d,]+ tests?\*\* in ", line)]
    counts = Counter[states.Kind]()
    for part in counts_line.rstrip().split(" · ")[1:]:
        kind, n = counted(part.split(" ", 1)[1])  # after the icon
        counts[kind] += n
    rows, gating, icons = Counter[states.Kind](), Counter[states.Kind](), []
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if not line.startswith("| ") or len(cells) != 7 or cells[1] in ("test", "---"):
            continue
        bold = cells[-1].startswith("**")
        kind = kind_of(cells[-1].strip("*"))
        many = re.match(r"(\d+) tests: ", cells[1])
        n = int(many.group(1)) if many else 1
        rows[kind] += n
        gating[kind] += n if bold else 0
        icons.append((cells[0], kind))
    base = [line for line in lines if line.startswith("Against base")]
    base_words: list[str] = []
    total = None
    if base:
        parts = base[0].split(": ", 1)[1].rstrip().split(" · ")
        total = sum(int(p.split(" ", 1)[0].replace(",", "")) for p in parts if p[0].isdigit())
        base_words = [p.split(" ", 1)[1] for p in parts if p[0].isdigit()]
    return Read(headline, counts, rows, gating, total, tuple(base_words), tuple(icons))


def _comparison(scenario: Scenario) -> Comparison:
    return compare(
        scenario.head,
        scenario.base,
        blockers=scenario.blockers,
        policy=scenario.policy,
        default_repo="sgl-project/sglang",
        proof=scenario.proof,
        history=scenario.history,
    )


SCENARIOS = [s for s in all_scenarios() if s.budget is None or s.budget >= render.COMMENT_LIMIT]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_part_of_one_comment_tells_the_same_story(scenario: Scenario):
    comparison = _comparison(scenario)
    said = read(scenario.render())
    # The counts line and the rows: every test in one state, counted once.
    assert said.counts == said.rows, (said.counts, said.rows)
    # The headline's reasons and the bold rows: what gates, the same tests.
    assert said.headline == +said.gating_rows, (said.headline, said.gating_rows)
    # Each row's icon is its state's.
    assert all(icon == states.WORDS[kind].icon for icon, kind in said.icons), said.icons
    # The base line observes and never judges; it counts every test once.
    if said.base_total is not None:
        assert said.base_total == len(comparison.deltas)
        assert set(said.base_words) <= set(states.AGAINST_BASE), said.base_words
    # The annotations: an error for each gating test, titled with its state.
    errors = Counter[states.Kind]()
    for line in render.workflow_commands(comparison):
        title = re.match(r"::(\w+) title=kl-bitexact (.*?)%3A (.*?)::", line)
        if title is None or title.group(1) != "error" or "more tests" in line:
            continue
        many = re.fullmatch(r"(\d+) tests", title.group(3))
        errors[kind_of(title.group(2))] += int(many.group(1)) if many else 1
    assert errors == +said.gating_rows, (errors, said.gating_rows)
    # The terminal: a line for each test not ok, in the same state as its row.
    shown = Counter[states.Kind]()
    for said_line in terminal.not_passed_lines(comparison):
        more = re.search(r" and (\d+) more tests?:", said_line.text)
        shown[kind_of(said_line.state)] += 1 + (int(more.group(1)) if more else 0)
    quiet = Counter({k: n for k, n in said.rows.items() if k not in states.QUIET})
    assert shown == quiet, (shown, quiet)


def test_every_state_has_its_words_and_no_two_states_share_a_word():
    assert set(states.WORDS) == set(states.Kind)
    # A new verdict is one entry here too: Comparison.state names it by its value.
    assert {v.value for v in Verdict} <= {k.value for k in states.Kind}
    words = [w.one for w in states.WORDS.values()]
    assert len(set(words)) == len(words)


def test_the_goldens_hold_every_outcome_of_issue_37():
    """A golden per outcome, each read by the test above: all green, a regression, could not
    run, flaky, a known failure let through, expected red, not exercised and not judged on the
    reference engine; the base line's words for the last two are their own."""
    seen = Counter[states.Kind]()
    words: set[str] = set()
    for scenario in SCENARIOS:
        said = read(scenario.render())
        seen += said.rows + said.counts
        words |= set(said.base_words)
    outcomes = {
        states.Kind.OK,
        states.Kind.REGRESSION,
        states.Kind.COULD_NOT_RUN,
        states.Kind.FLAKY,
        states.Kind.KNOWN,
        states.Kind.EXPECTED_RED,
        states.Kind.NOT_EXERCISED,
        states.Kind.NOT_JUDGED,
    }
    assert outcomes <= set(seen), outcomes - set(seen)
    assert {"newly not exercised", "newly not judged"} <= words
    assert "newly not run" not in {
        said for s in SCENARIOS if s.name == "not_exercised" for said in read(s.render()).base_words
    }

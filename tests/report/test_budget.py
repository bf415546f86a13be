"""budget.fit: what is kept, in which order, and what is counted as cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.report.budget import KEEP, Block, Section, fit


def block(priority: int, text: str, label: str = "x") -> Block:
    return Block(priority, lambda: text, label)


def test_everything_fits_without_a_budget():
    sections = [Section([block(KEEP, "a"), block(3, "b")], head="[", tail="]")]
    assert fit(sections, None) == (["[ab]"], {})


def test_lower_priorities_are_kept_first_and_cuts_are_counted():
    sections = [
        Section([block(KEEP, "H" * 10)]),
        Section([block(2, "d" * 10, "details"), block(2, "d" * 10, "details")], head="<", tail=">"),
        Section([block(1, "r" * 10, "rows")]),
    ]
    texts, cut = fit(sections, 32)
    assert texts == ["H" * 10, "<" + "d" * 10 + ">", "r" * 10]
    assert cut == {"details": 1}


def test_a_section_with_no_kept_block_disappears_with_its_head():
    sections = [Section([block(KEEP, "H" * 10)]), Section([block(1, "x" * 50)], head="## T\n")]
    assert fit(sections, 20) == (["H" * 10, ""], {"x": 1})


def test_kept_blocks_keep_their_document_order():
    sections = [Section([block(2, "a"), block(1, "b"), block(2, "c")])]
    assert fit(sections, 10)[0] == ["abc"]


def test_keep_blocks_are_never_dropped():
    assert fit([Section([block(KEEP, "x" * 30)])], 10)[0] == ["x" * 30]


def test_blocks_past_the_budget_are_not_rendered():
    rendered: list[int] = []

    def lazy(i: int) -> Block:
        def render() -> str:
            rendered.append(i)
            return "y" * 10

        return Block(1, render, "rows")

    texts, cut = fit([Section([lazy(i) for i in range(1000)])], 35)
    assert texts == ["y" * 30] and cut == {"rows": 997}
    assert rendered == [0, 1, 2, 3]  # the first that did not fit, and no more


@given(
    st.lists(st.lists(st.tuples(st.integers(1, 4), st.text(max_size=30)), max_size=8), max_size=5),
    st.integers(0, 200),
)
def test_never_over_budget_without_keep_blocks(layout, budget):
    sections = [
        Section([block(p, text) for p, text in blocks], head="<h>", tail="</h>")
        for blocks in layout
    ]
    texts, cut = fit(sections, budget)
    assert len("".join(texts)) <= budget
    assert sum(cut.values()) <= sum(len(blocks) for blocks in layout)

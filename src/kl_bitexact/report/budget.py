"""Fit a document into a budget by dropping its least important blocks (pure).

GitHub rejects a comment over 65,536 characters, and cuts a step's job summary at 1 MiB
of UTF-8: `measure` is what the budget counts (`len`, or `utf8_size`). A document is a
list of sections in reading order; each section holds blocks with a priority (0 is never
dropped). Blocks are rendered lazily, most important tier first, so a run of 10,000 tests
renders only what fits; what did not fit is counted by its label so the reader is told
what was cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

KEEP = 0  # the priority of blocks that are never dropped


class Block(msgspec.Struct, frozen=True):
    """One lazily rendered part of a section. A frozen msgspec Struct (issue 40): a report
    of 100,000 tests has a block per row, and a frozen dataclass's `__init__` sets each
    field through `object.__setattr__`; a Struct's is done in C."""

    priority: int
    render: Callable[[], str]
    label: str = ""  # what the block is, counted when it is cut ("passing test row")


@dataclass(frozen=True)
class Section:
    """Text around a run of blocks; shown only when at least one of its blocks is."""

    blocks: Sequence[Block]
    head: str = ""
    tail: str = ""


def utf8_size(text: str) -> int:
    """Bytes `text` takes in UTF-8: an emoji is 1 character and 4 bytes (issue 14: a
    summary budgeted in characters was 3.79 MB of bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass
class _Fitted:
    budget: int | None
    measure: Callable[[str], int] = len
    used: int = 0
    kept: dict[tuple[int, int], str] = field(default_factory=dict)
    opened: set[int] = field(default_factory=set)
    cut: Counter[str] = field(default_factory=Counter)


def fit(
    sections: Sequence[Section], budget: int | None, measure: Callable[[str], int] = len
) -> tuple[list[str], Counter[str]]:
    """The text of each section that fits (in order; "" when empty) and the cut counts.

    Within one tier a section stops at its first block that does not fit, so what is
    kept is always a prefix of the section's blocks of that tier.
    """
    state = _Fitted(budget, measure)
    tiers = [_tiers(section) for section in sections]
    for priority in sorted({priority for tier in tiers for priority in tier}):
        for index, section in enumerate(sections):
            _fill(state, index, section, tiers[index].get(priority, []))
    return [_join(state, i, s) for i, s in enumerate(sections)], state.cut


def _tiers(section: Section) -> dict[int, list[tuple[int, Block]]]:
    """The section's blocks (with their positions) grouped by priority."""
    tiers: dict[int, list[tuple[int, Block]]] = {}
    for position, block in enumerate(section.blocks):
        tiers.setdefault(block.priority, []).append((position, block))
    return tiers


def _fill(state: _Fitted, index: int, section: Section, tier: list[tuple[int, Block]]) -> None:
    for position, (block_index, block) in enumerate(tier):
        rendered = block.render()
        frame = 0 if index in state.opened else state.measure(section.head + section.tail)
        cost = state.measure(rendered) + frame
        fits = state.budget is None or state.used + cost <= state.budget
        if not (fits or block.priority == KEEP):
            state.cut.update(b.label for _, b in tier[position:])
            return
        state.kept[(index, block_index)] = rendered
        state.opened.add(index)
        state.used += cost


def _join(state: _Fitted, index: int, section: Section) -> str:
    if index not in state.opened:
        return ""
    parts = (state.kept.get((index, i)) for i in range(len(section.blocks)))
    return section.head + "".join(p for p in parts if p is not None) + section.tail

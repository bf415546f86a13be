"""`yamlio.load` reads a file in one pass over the parser's events (issue 40: a cold lint-ci
read sglang's 100 workflows twice, once for the bounds and once to build them) and hands
anything unusual to the three-pass reader. Property: for any text, the two give the same
document with the same positions, or the same error."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import yamlio

# Scalars where YAML 1.1, 1.2 and GitHub disagree, plus merge keys, tags and long numbers.
SCALARS = (
    "a", "on", "yes", "No", "true", "False", "null", "~", "", "12", "-3", "+4", "0o17",
    "0x1F", "1_000", "1.5e3", ".5", "-.inf", ".NaN", "2024-01-01", "1:30", "<<", '"q"',
    "'s'", '"1"', "!!str 5", "!x y", "! z", "9" * 120, "'" + "9" * 120 + "'", "a b", "-",
)  # fmt: skip
KEYS = ("a", "b", "on", "1", "true", "<<", '"a"', "~", "? [k]", "? {k: v}")


def _node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pairs = st.lists(st.tuples(st.sampled_from(KEYS), children), max_size=4)
    return st.one_of(
        st.tuples(st.just("map"), pairs, st.booleans()),
        st.tuples(st.just("seq"), st.lists(children, max_size=4), st.booleans()),
    )


LEAVES = st.one_of(
    st.tuples(st.just("scalar"), st.sampled_from(SCALARS)),
    st.tuples(st.just("block"), st.sampled_from(("|", ">", "|-")), st.sampled_from(("x", "y z"))),
    st.tuples(st.just("alias"), st.sampled_from(("a0", "a1", "a2", "b"))),
)
NODES = st.recursive(LEAVES, _node, max_leaves=14)


class _Emitter:
    def __init__(self, anchors: list[bool]) -> None:
        self.anchors = anchors
        self.count = 0

    def anchor(self) -> str:
        index = self.count
        self.count += 1
        wanted = self.anchors[index % len(self.anchors)] if self.anchors else False
        return f"&a{index % 3} " if wanted else ""

    def flow(self, node: Any) -> str:
        kind = node[0]
        if kind == "scalar":
            return self.anchor() + node[1]
        if kind == "block":
            return self.anchor() + '"' + node[2] + '"'
        if kind == "alias":
            return "*" + node[1]
        if kind == "map":
            inner = ", ".join(f"{key}: {self.flow(value)}" for key, value in node[1])
            return self.anchor() + "{" + inner + "}"
        return self.anchor() + "[" + ", ".join(self.flow(item) for item in node[1]) + "]"

    def block(self, node: Any, indent: int) -> str:
        """Text after `key:` or `-` (a leading space or a newline), at `indent`."""
        kind = node[0]
        pad = " " * indent
        if kind == "block":
            return f" {self.anchor()}{node[1]}\n{pad}  {node[2]}\n"
        if kind in ("scalar", "alias") or node[2] or not node[1]:
            return " " + self.flow(node) + "\n"
        head = self.anchor().strip()
        lines = [f" {head}\n" if head else "\n"]
        for entry in node[1]:
            key, value = entry if kind == "map" else ("-", entry)
            lines.append(f"{pad}{key}{':' if kind == 'map' else ''}{self.block(value, indent + 2)}")
        return "".join(lines)


def _text(node: Any, anchors: list[bool], documents: int) -> str:
    emitter = _Emitter(anchors)
    body = emitter.block(node, 0)
    if node[0] in ("map", "seq") and not node[2] and node[1] and body.startswith("\n"):
        body = body[1:]
    return "---\n".join([body] * documents)


def _same(fast: Any, slow: Any) -> bool:
    """Equal data, positions and block styles all the way down."""
    if type(fast) is not type(slow):
        return False
    if isinstance(slow, yamlio.LineDict):
        meta = ("line", "key_lines", "value_lines", "block_values")
        if any(getattr(fast, m) != getattr(slow, m) for m in meta) or list(fast) != list(slow):
            return False
        return all(_same(fast[key], slow[key]) for key in slow)
    if isinstance(slow, yamlio.LineList):
        if (fast.line, fast.item_lines, len(fast)) != (slow.line, slow.item_lines, len(slow)):
            return False
        return all(_same(a, b) for a, b in zip(fast, slow, strict=True))
    if isinstance(slow, float) and math.isnan(slow):
        return math.isnan(fast)
    return bool(fast == slow)


def _outcome(read: Any, text: str) -> tuple[str, Any]:
    try:
        return "document", read(text, "w.yml")
    except ConfigError as problem:
        return "error", (problem.message, problem.hint)


@settings(max_examples=400, deadline=None)
@given(NODES, st.lists(st.booleans(), max_size=5), st.integers(1, 2))
def test_one_pass_reads_what_three_passes_read(
    node: Any, anchors: list[bool], documents: int
) -> None:
    text = _text(node, anchors, documents)
    fast, slow = _outcome(yamlio.load, text), _outcome(yamlio.load_checked, text)
    assert fast[0] == slow[0], text
    assert fast[1] == slow[1] if fast[0] == "error" else _same(fast[1], slow[1]), text


def test_the_one_pass_reader_takes_ordinary_workflows_itself() -> None:
    # Speed depends on it: a file it gives up on is read three times.
    text = (
        "name: x\non:\n  pull_request:\njobs:\n  a:\n    runs-on: &r [self-hosted, 1-gpu]\n"
        "    strategy: {matrix: {include: [{stage: s, runner_config: r}]}}\n    steps:\n"
        "      - run: |\n          cd test\n          python3 run_suite.py --suite s\n"
        '        timeout-minutes: 30\n  b: {runs-on: *r, if: "${{ true }}"}\n'
    )
    document = yamlio.one_pass(text)
    assert _same(document, yamlio.load_checked(text, "w.yml"))
    assert document["jobs"]["b"]["runs-on"] is document["jobs"]["a"]["runs-on"]

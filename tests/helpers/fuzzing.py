"""Mutation fuzzing for tests/test_fuzz.py: valid documents, bent at random places.

A mutation is drawn up front as plain data (where to go, what to do), then applied to a
document deterministically: hypothesis shrinks a failure to the fewest and smallest
mutations, and a mutation can be applied later in another thread (the engine fuzz answers
HTTP requests from the request's worker thread, where nothing may be drawn).
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

# Numbers that broke readers before (issue 20) or sit on an edge: the smallest subnormal,
# the largest float, integers past int64, negative zero.
EDGE_NUMBERS = st.sampled_from(
    [0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 5e-324, -0.0, 1e308, -1e308, 0.5, 1e-9]
)
EDGE_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
EDGE_TEXT = st.sampled_from(
    ["", " ", "x", "NaN", "-1", "1e999", "::", "a::b", "#1", "o/r#1", "\x00", "\u202e", "é", "{}"]
)

SCALARS = (
    st.none()
    | st.booleans()
    | EDGE_NUMBERS
    | st.integers(min_value=-(10**20), max_value=10**20)
    | EDGE_FLOATS
    | EDGE_TEXT
    | st.text(max_size=12)
)


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=6) | EDGE_TEXT, inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


@dataclass(frozen=True)
class Mutation:
    """Walk `path` (each step an index into the node's children, modulo their count),
    then `action` the node reached: replace it with `value`, delete it, put `value` beside
    it, wrap it in a list or an object, or nest it `depth` lists deep."""

    path: tuple[int, ...]
    action: str
    value: Any = None
    depth: int = 0
    # Walk from the caller's `focus` (e.g. a results file's tests), not from the root.
    focused: bool = False


# "tweak" keeps the JSON type (a number stays a number, a list a list), so the document
# often stays valid and reaches the code after validation; the others break its shape.
ACTIONS = (
    "tweak",
    "tweak",
    "tweak",
    "tweak",
    "replace",
    "replace",
    "delete",
    "insert",
    "wrap",
    "nest",
)


@st.composite
def mutations(
    draw: st.DrawFn, max_count: int = 4, min_count: int = 1, actions: Sequence[str] = ACTIONS
) -> tuple[Mutation, ...]:
    """Up to `max_count` mutations; half the time only tweaks, which keep the document's
    shape, so that it passes validation and reaches what reads it after."""
    count = draw(st.integers(min_value=min_count, max_value=max_count))
    only_tweaks = draw(st.booleans())
    chosen = ("tweak",) if only_tweaks else tuple(actions)
    return tuple(draw(_mutation(chosen)) for _ in range(count))


# Mostly deep: a document's leaves (a test's fields) are where valid-looking trouble
# hides; the top (schema_version, the root itself) is refused at once.
_DEEP = st.lists(st.integers(0, 1000), min_size=4, max_size=10)
_SHALLOW = st.lists(st.integers(0, 1000), max_size=3)


@st.composite
def _mutation(draw: st.DrawFn, actions: Sequence[str]) -> Mutation:
    action = draw(st.sampled_from(actions))
    # A tweak's value is a seed: one number, text and integer serve whatever it lands on.
    value = (
        draw(
            st.tuples(
                EDGE_NUMBERS | EDGE_FLOATS, EDGE_TEXT | st.text(max_size=8), st.integers(0, 50)
            )
        )
        if action == "tweak"
        else draw(json_values())
    )
    return Mutation(
        path=tuple(draw(_DEEP | _DEEP | _DEEP | _SHALLOW)),
        action=action,
        value=value,
        depth=draw(st.sampled_from([2, 63, 65, 200])),
        focused=draw(st.sampled_from([True, True, True, False])),
    )


def mutate(document: Any, changes: Sequence[Mutation], focus: Sequence[int] = ()) -> Any:
    """A copy of `document` with every mutation applied in order; a focused mutation's
    path starts with `focus` (an `at(...)` path)."""
    result = copy.deepcopy(document)
    for change in changes:
        result = _apply(result, change, tuple(focus) if change.focused else ())
    return result


def _apply(root: Any, change: Mutation, focus: tuple[int, ...]) -> Any:
    parent: Any = None
    key: Any = None
    node = root
    for step in focus + change.path:
        children = _children(node)
        if not children:
            break
        parent, key = node, children[step % len(children)]
        node = node[key]
    new = _changed(node, change)
    if parent is None:
        return None if new is _DELETE else new
    if new is _DELETE:
        del parent[key]
    elif change.action == "insert" and isinstance(parent, list):
        parent.insert(key, change.value)
    elif change.action == "insert":
        parent[f"{key}_"] = change.value
    else:
        parent[key] = new
    return root


_DELETE = object()


def _changed(node: Any, change: Mutation) -> Any:
    if change.action == "delete":
        return _DELETE
    if change.action == "tweak":
        return _tweaked(node, change.value)
    if change.action == "wrap":
        return [node] if change.depth % 2 else {"x": node}
    if change.action == "nest":
        nested = node
        for _ in range(change.depth):
            nested = [nested]
        return nested
    if change.action == "insert":
        return node
    return change.value


def _tweaked(node: Any, seed: tuple[Any, str, int]) -> Any:
    """Another value of the node's own JSON type."""
    number, text, count = seed
    if isinstance(node, bool):
        return not node
    if isinstance(node, int):
        if isinstance(number, int):
            return number
        return int(number) if math.isfinite(number) else -count
    if isinstance(node, float):
        return float(number)
    if isinstance(node, str):
        return text
    if isinstance(node, list):  # shorter, longer or reordered
        if not node:
            return [number] * (count % 3)
        return (node * (count % 3 + 1))[: count % (len(node) + 2)] or node[::-1]
    if isinstance(node, dict):
        keys = list(node)
        return {k: node[k] for k in keys[: count % (len(keys) + 1)]}  # keys dropped
    return number  # null: a number where nothing was


def at(document: Any, *keys: Any) -> tuple[int, ...]:
    """The mutation path to `document[k1][k2]...`: for writing known crashes as examples."""
    path = []
    node = document
    for key in keys:
        path.append(_children(node).index(key))
        node = node[key]
    return tuple(path)


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


@st.composite
def text_edits(draw: st.DrawFn, max_count: int = 3) -> tuple[tuple[int, int, str], ...]:
    """(where, how many characters to cut, what to put there), for raw-text fuzzing."""
    count = draw(st.integers(min_value=0, max_value=max_count))
    return tuple(
        (
            draw(st.integers(0, 100_000)),
            draw(st.integers(0, 8)),
            draw(st.text(max_size=6) | EDGE_TEXT | st.sampled_from(["\n", "\r", "\t", "'"])),
        )
        for _ in range(count)
    )


def edit(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    for where, cut, put in edits:
        at = where % (len(text) + 1)
        text = text[:at] + put + text[at + cut :]
    return text


def cli(argv: Sequence[str]) -> tuple[int, str]:
    """`kl-bitexact ARGV` in this process (a thousand subprocesses would take minutes):
    the exit code and what it printed on stderr. Output is kept, not printed."""
    from kl_bitexact.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@contextlib.contextmanager
def environment(**values: str) -> Any:
    """Environment variables set for the block (fixtures cannot be used under @given)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

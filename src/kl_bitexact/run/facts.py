"""The facts a test states about its server, checked against what the server reports (pure).

A test that guards a cache path is worth something only on a server that takes that path:
hierarchical cache on, the speculative algorithm that builds the runner, the radix cache
not resolved away (issue 35; sglang PRs 35293, 36401, 34356). Each `expect` entry is looked
up in the server's own answer (`engines.base.Reported`: sglang's /server_info, llama.cpp's
/props, vLLM's /server_info) and becomes a `results.model.Fact`: it holds, it differs, or
the server cannot tell. What a fact that does not hold means for the test is
`results.verdict`'s rule, not this module's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kl_bitexact.results.model import Fact, FactState
from kl_bitexact.run.engines.base import Reported
from kl_bitexact.suite.model import Condition, Expect

MAX_REPORTED_CHARS = 200
_ABSENT = object()


def check(expected: Sequence[Expect], reported: Reported) -> tuple[Fact, ...]:
    """Each stated fact against the server's answer, in the order stated."""
    return tuple(_fact(fact, reported) for fact in expected)


def _fact(expect: Expect, reported: Reported) -> Fact:
    stated = json.loads(expect.value)
    said = lookup(reported.values, expect.name)
    shown = described(expect.condition, stated)
    if said is _ABSENT:
        why = reported.why_none or f"its answer has no `{expect.name}`"
        return Fact(expect.name, shown, FactState.UNKNOWN, None, reported.source, why)
    state = FactState.HOLDS if meets(expect.condition, stated, said) else FactState.DIFFERS
    return Fact(expect.name, shown, state, compact(said), reported.source)


def lookup(values: Mapping[str, Any], name: str) -> Any:
    """The value `name` names in a server's answer: the key itself, else its dotted path
    through nested objects (and lists, by index); `_ABSENT` when there is none."""
    if name in values:
        return values[name]
    node: Any = values
    for part in name.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _ABSENT
    return node


def meets(condition: Condition, stated: Any, said: Any) -> bool:
    if condition is Condition.EQUALS:
        return same(stated, said)
    if condition is Condition.ONE_OF:
        return any(same(option, said) for option in stated)
    if not _is_number(said):
        return False
    return bool(said <= stated if condition is Condition.AT_MOST else said >= stated)


def same(a: Any, b: Any) -> bool:
    """JSON equality: `true` is not `1` (Python's == says it is), 512 is 512.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    return type(a) is type(b) and bool(a == b)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def described(condition: Condition, stated: Any) -> str:
    """The condition as a reader (and results.json's `expected`) says it."""
    text = compact(stated)
    if condition is Condition.EQUALS:
        return text
    return f"{condition.value.replace('_', ' ')} {text}"


def compact(value: Any) -> str:
    """A reported value as short JSON (a server's answer may hold anything)."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > MAX_REPORTED_CHARS:
        return text[: MAX_REPORTED_CHARS - 1] + "…"
    return text

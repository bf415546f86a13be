"""`expect`: the facts a suite (`server.expect`) or a test states about its server (pure).

    server:
      expect:
        enable_hierarchical_cache: true
        speculative_algorithm: {one_of: [DSPARK, EAGLE]}
        max_total_tokens: {at_most: 512}
        cuda_graph_config.prefill.backend: breakable

A plain value must equal what the server reports (JSON equality: `true` is not `1`); a
mapping is one condition (`at_most`, `at_least`: a number; `one_of`: a non-empty list). A
test's own `expect` adds to its suite's, replacing a fact of the same name. Values are kept
as canonical JSON text in `Expect`, so specs stay hashable (launch groups, proof changes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.suite.model import Condition, Expect
from kl_bitexact.suite.reader import Reader, kind

# A suite states a handful; the bound keeps a hostile file from growing every result.
MAX_FACTS = 100
MAX_VALUE_CHARS = 1000
_NUMERIC = (Condition.AT_MOST, Condition.AT_LEAST)
_HINT = (
    "e.g. expect: {enable_hierarchical_cache: true, max_total_tokens: {at_most: 512}, "
    "speculative_algorithm: {one_of: [DSPARK]}} (docs/suites.md, Server facts)"
)


def read(reader: Reader, key: str = "expect") -> tuple[Expect, ...]:
    """The `expect` mapping under `reader` (empty when absent), each entry checked."""
    value = reader.mapping.get(key, {})
    if not isinstance(value, Mapping):
        raise reader.fail(key, f"expected a mapping of facts to values, got {kind(value)}", _HINT)
    if len(value) > MAX_FACTS:
        raise reader.fail(key, f"{len(value)} facts; at most {MAX_FACTS}")
    return tuple(sorted((_one(reader, key, name, item) for name, item in value.items()), key=_name))


def merged(suite: tuple[Expect, ...], test: tuple[Expect, ...]) -> tuple[Expect, ...]:
    """The suite's facts with the test's over them (by name), sorted by name."""
    by_name = {fact.name: fact for fact in suite} | {fact.name: fact for fact in test}
    return tuple(sorted(by_name.values(), key=_name))


def _name(fact: Expect) -> str:
    return fact.name


def _one(reader: Reader, key: str, name: Any, value: Any) -> Expect:
    where = f"{key}.{name}"
    if not isinstance(name, str) or not all(part.strip() for part in name.split(".")):
        raise reader.fail(
            key,
            f"{name!r} is not a fact's name",
            "name a key the server reports; dots reach into nested answers",
        )
    if isinstance(value, Mapping):
        return _condition(reader, where, name, value)
    return Expect(name, Condition.EQUALS, _json(reader, where, value))


def _condition(reader: Reader, where: str, name: str, value: Mapping[str, Any]) -> Expect:
    options = [c.value for c in Condition if c is not Condition.EQUALS]
    if len(value) != 1 or next(iter(value)) not in options:
        raise reader.fail(
            where,
            f"a mapping states one condition ({', '.join(options)}), got {sorted(map(str, value))}",
            f"compare a nested value by its dotted name instead: {name}.KEY: VALUE",
        )
    condition, operand = Condition(next(iter(value))), next(iter(value.values()))
    if condition in _NUMERIC and not _is_number(operand):
        raise reader.fail(where, f"{condition.value} takes a number, got {kind(operand)}")
    if condition is Condition.ONE_OF and (not isinstance(operand, list) or not operand):
        raise reader.fail(where, f"one_of takes a non-empty list, got {kind(operand)}")
    return Expect(name, condition, _json(reader, where, operand))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _json(reader: Reader, where: str, value: Any) -> str:
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise reader.fail(
            where, f"{kind(value)} is not a JSON value", "quote it: a server reports JSON"
        ) from None
    if len(text) > MAX_VALUE_CHARS:
        raise ConfigError(f"{reader.source}: {where}: longer than {MAX_VALUE_CHARS} characters")
    return text

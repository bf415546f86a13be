"""Evaluate the GitHub Actions `${{ }}` expressions a workflow uses to name suites (pure).

Enough of the expression language to follow values the way the runner does: string,
number, boolean and null literals; `inputs.*`, `matrix.*` and `env.*` references (and
properties of an object value: `matrix.config.path`); `!`,
`==`, `!=`, `&&`, `||` (which return an operand, as in JavaScript) and parentheses; and
`format()`. Anything else (`github.*`, `needs.*`, `steps.*`, `fromJson`, an index) is
UNKNOWN: only the run knows it, and the caller reports what it could not resolve.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
# context name -> values (None: that whole context is unknown)
Context = Mapping[str, Mapping[str, Any] | None]

_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)"
    r"|(?P<op>&&|\|\||==|!=|!|\(|\)|,)|(?P<name>[A-Za-z_][\w-]*(?:\.[\w-]+|\.\*)*)"
    r"|(?P<other>\S))"
)


def substitute(
    text: str, context: Context, unknown: Callable[[str], str] = lambda expression: expression
) -> str:
    """`text` with each `${{ }}` replaced by its value; one that stays unknown is replaced
    by `unknown(the expression's text)`."""

    def replace(match: re.Match[str]) -> str:
        value = evaluate(match.group(1), context)
        return unknown(match.group(0)) if value is UNKNOWN else to_text(value)

    return EXPRESSION.sub(replace, text)


def evaluate(expression: str, context: Context) -> Any:
    return _compiled(expression)(context)


# An expression parsed once into a function of the context: a workflow evaluates the same
# few hundred expressions once per caller, matrix combination and step.
Node = Callable[[Context], Any]


def _unknown(context: Context) -> Any:
    return UNKNOWN


@functools.lru_cache(maxsize=4096)
def _compiled(expression: str) -> Node:
    """The expression as a function of the context; UNKNOWN whatever the context when it
    does not parse (what parses never depends on the values)."""
    tokens = _tokens(expression)
    if any(kind == "other" for kind, _ in tokens):
        return _unknown
    parser = _Parser(tokens)
    try:
        node = parser.parse_or()
    except _Unparsable:
        return _unknown
    return node if parser.position == len(tokens) else _unknown


def to_text(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@functools.lru_cache(maxsize=4096)
def _tokens(expression: str) -> tuple[tuple[str, str], ...]:
    """The tokens of an expression (cached: workflows repeat the same few thousand)."""
    return tuple(_scan(expression))


def _scan(expression: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(expression.strip()):
        kind = match.lastgroup or "other"
        found.append((kind, match.group(kind)))
    return found


class _Unparsable(Exception):
    pass


class _Parser:
    """Recursive descent over the tokens, building a `Node` per rule; every operand is
    evaluated, left to right, as the runner does before combining them."""

    def __init__(self, tokens: Sequence[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.position >= len(self.tokens):
            raise _Unparsable
        self.position += 1
        return self.tokens[self.position - 1]

    def parse_or(self) -> Node:
        node = self.parse_and()
        while self.peek() == "||":
            self.take()
            node = _either(node, self.parse_and())
        return node

    def parse_and(self) -> Node:
        node = self.parse_not()
        while self.peek() == "&&":
            self.take()
            node = _both(node, self.parse_not())
        return node

    def parse_not(self) -> Node:
        if self.peek() == "!":
            self.take()
            return _negated(self.parse_not())
        return self.parse_compare()

    def parse_compare(self) -> Node:
        left = self.parse_primary()
        if self.peek() in ("==", "!="):
            operator = self.take()[1]
            return _compared(left, operator, self.parse_primary())
        return left

    def parse_primary(self) -> Node:
        kind, text = self.take()
        if kind == "string":
            return _constant(text[1:-1].replace("''", "'"))
        if kind == "number":
            return _constant(float(text))
        if text == "(":
            node = self.parse_or()
            if self.take()[1] != ")":
                raise _Unparsable
            return node
        if kind != "name":
            raise _Unparsable
        if self.peek() == "(":
            return self.call(text)
        if self.peek() == "[" or text.endswith(".*"):
            return _unknown
        return _reference(text)

    def call(self, name: str) -> Node:
        self.take()
        arguments = []
        while self.peek() != ")":
            arguments.append(self.parse_or())
            if self.peek() == ",":
                self.take()
        self.take()
        return _called(name, arguments)


def _constant(value: Any) -> Node:
    return lambda context: value


def _either(left: Node, right: Node) -> Node:
    def node(context: Context) -> Any:  # `a || b`: the first truthy operand
        value, other = left(context), right(context)
        return UNKNOWN if value is UNKNOWN else (value if _truthy(value) else other)

    return node


def _both(left: Node, right: Node) -> Node:
    def node(context: Context) -> Any:  # `a && b`: the first falsy operand
        value, other = left(context), right(context)
        return UNKNOWN if value is UNKNOWN else (other if _truthy(value) else value)

    return node


def _negated(inner: Node) -> Node:
    def node(context: Context) -> Any:
        value = inner(context)
        return UNKNOWN if value is UNKNOWN else not _truthy(value)

    return node


def _compared(left: Node, operator: str, right: Node) -> Node:
    def node(context: Context) -> Any:
        value, other = left(context), right(context)
        if value is UNKNOWN or other is UNKNOWN:
            return UNKNOWN
        equal = _loose(value) == _loose(other)
        return equal if operator == "==" else not equal

    return node


def _called(name: str, arguments: list[Node]) -> Node:
    def node(context: Context) -> Any:
        values = [argument(context) for argument in arguments]
        if name.lower() != "format" or not values or any(v is UNKNOWN for v in values):
            return UNKNOWN
        return _format(to_text(values[0]), [to_text(v) for v in values[1:]])

    return node


def _format(template: str, values: list[str]) -> str:
    return re.sub(
        r"\{(\d+)\}",
        lambda m: values[int(m.group(1))] if int(m.group(1)) < len(values) else "",
        template,
    )


def _reference(name: str) -> Node:
    lowered = name.lower()
    if lowered in ("true", "false"):
        return _constant(lowered == "true")
    if lowered == "null":
        return _constant(None)
    head, _, rest = name.partition(".")
    if not rest or "*" in rest:
        return _unknown
    key, _, deeper = rest.partition(".")
    parts = deeper.split(".") if deeper else []

    def node(context: Context) -> Any:
        values = context.get(head)
        if values is None:
            return UNKNOWN
        # A matrix key an entry lacks is null; an input or env name nobody set is unknown.
        value = values.get(key, None) if head == "matrix" else values.get(key, UNKNOWN)
        for part in parts:
            # `matrix.config.path`: a property of an object value (missing: null)
            if not isinstance(value, Mapping):
                return UNKNOWN
            value = value.get(part, None)
        return value

    return node


def _truthy(value: Any) -> bool:
    return value not in (None, False, "", 0, 0.0)


def _loose(value: Any) -> Any:
    """GitHub compares strings case-insensitively and coerces numbers."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value.lower()
    if value is True or value is False:
        return float(value)
    return value

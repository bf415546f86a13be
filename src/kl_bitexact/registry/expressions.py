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
    tokens = _tokens(expression)
    if any(kind == "other" for kind, _ in tokens):
        return UNKNOWN
    parser = _Parser(tokens, context)
    try:
        value = parser.parse_or()
    except _Unparsable:
        return UNKNOWN
    return value if parser.position == len(tokens) else UNKNOWN


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
    def __init__(self, tokens: Sequence[tuple[str, str]], context: Context) -> None:
        self.tokens = tokens
        self.position = 0
        self.context = context

    def peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.position >= len(self.tokens):
            raise _Unparsable
        self.position += 1
        return self.tokens[self.position - 1]

    def parse_or(self) -> Any:
        value = self.parse_and()
        while self.peek() == "||":
            self.take()
            right = self.parse_and()
            value = UNKNOWN if value is UNKNOWN else (value if _truthy(value) else right)
        return value

    def parse_and(self) -> Any:
        value = self.parse_not()
        while self.peek() == "&&":
            self.take()
            right = self.parse_not()
            value = UNKNOWN if value is UNKNOWN else (right if _truthy(value) else value)
        return value

    def parse_not(self) -> Any:
        if self.peek() == "!":
            self.take()
            value = self.parse_not()
            return UNKNOWN if value is UNKNOWN else not _truthy(value)
        return self.parse_compare()

    def parse_compare(self) -> Any:
        left = self.parse_primary()
        if self.peek() in ("==", "!="):
            operator = self.take()[1]
            right = self.parse_primary()
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            equal = _loose(left) == _loose(right)
            return equal if operator == "==" else not equal
        return left

    def parse_primary(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(text)
        if text == "(":
            value = self.parse_or()
            if self.take()[1] != ")":
                raise _Unparsable
            return value
        if kind != "name":
            raise _Unparsable
        if self.peek() == "(":
            return self.call(text)
        if self.peek() == "[" or text.endswith(".*"):
            return UNKNOWN
        return self.reference(text)

    def call(self, name: str) -> Any:
        self.take()
        arguments = []
        while self.peek() != ")":
            arguments.append(self.parse_or())
            if self.peek() == ",":
                self.take()
        self.take()
        if name.lower() != "format" or not arguments or any(a is UNKNOWN for a in arguments):
            return UNKNOWN
        template = to_text(arguments[0])
        values = [to_text(a) for a in arguments[1:]]
        return re.sub(
            r"\{(\d+)\}",
            lambda m: values[int(m.group(1))] if int(m.group(1)) < len(values) else "",
            template,
        )

    def reference(self, name: str) -> Any:
        lowered = name.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        head, _, rest = name.partition(".")
        values = self.context.get(head)
        if values is None or not rest or "*" in rest:
            return UNKNOWN
        key, _, deeper = rest.partition(".")
        # A matrix key an entry lacks is null; an input or env name nobody set is unknown.
        value = values.get(key, None) if head == "matrix" else values.get(key, UNKNOWN)
        for part in deeper.split(".") if deeper else ():
            # `matrix.config.path`: a property of an object value (missing: null)
            if not isinstance(value, Mapping):
                return UNKNOWN
            value = value.get(part, None)
        return value


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

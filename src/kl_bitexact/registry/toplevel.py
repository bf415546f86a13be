"""Find a test file's top-level registration calls and main block without parsing the file.

`ast.parse` of a 10 KB test file costs ~10 ms; sglang's test/registered/ holds ~3,600 of
them. The registration calls and the `if __name__ == "__main__":` block are top-level
statements (they start at column 0), so only their own text needs parsing: each candidate
is cut out up to the next line that starts at column 0, and only that slice is parsed.
Anything unusual returns None and the caller parses the whole file, which is exact: a
call that does not start a line (nested, assigned, or in a comment or string), a candidate
after an odd number of triple quotes (it may sit inside a docstring), a slice that is not
exactly one statement of the expected kind, a file without any candidate. A call of
keyword literals only (most registrations) is not even parsed: its text is read by a
pattern of the forms whose value is their text, and anything else is parsed.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass

Literal = str | bool | int | float | None  # a constant a registration call may be given
_REGISTER = re.compile(r"register_\w+_ci\s*\(")
_MAIN = "\nif __name__"  # a plain search: a `^` regex tries every line and costs 10x
# A line starting at column 0 with code (not blank, not a comment, not the closing bracket
# of a multi-line call): the next statement.
_TOP_LEVEL_LINE = re.compile(r"^[^\s#)\]}]", re.MULTILINE)


class LiteralCall:
    """A registration call of keyword literals only, read without `ast.parse` (building
    its ast.Call node by node costs more than the parse): what the scan reads of a call."""

    __slots__ = ("keywords", "lineno", "name")

    def __init__(self, name: str, lineno: int, keywords: tuple[tuple[str, Literal], ...]) -> None:
        self.name, self.lineno, self.keywords = name, lineno, keywords


@dataclass(frozen=True)
class TopLevel:
    # register_*_ci calls, line numbers as in the file
    calls: tuple[ast.Call | LiteralCall, ...]
    # parsed once per distinct text and shared between files (line numbers from 1): read
    # what they do, never change them
    main_blocks: tuple[ast.If, ...]


def locate(source: str, names: frozenset[str]) -> TopLevel | None:
    """The top-level calls to `names` and `if __name__ ==` blocks, or None when only a
    full parse can tell."""
    calls = []
    for match in _register_matches(source):
        start = match.start()
        before = source[start - 1] if start else "\n"
        if before.isalnum() or before in "_.":
            continue  # another name that merely ends like one (`my_register_x_ci(`)
        if before != "\n" or match.group().split("(")[0].strip() not in names:
            return None  # not at column 0, or an unknown backend: the full parse decides
        call = _call_at(source, start)
        if call is None:
            return None
        calls.append(call)
    if not calls:
        return None
    blocks = []
    for start in _line_starts(source, _MAIN):
        statement = _main_block_at(source, start)
        if not isinstance(statement, ast.If):
            return None
        blocks.append(statement)
    return TopLevel(tuple(calls), tuple(blocks))


def _register_matches(source: str) -> Iterator[re.Match[str]]:
    """`_REGISTER.finditer(source)`, found by the literal `register_` first: the regex
    engine walks every character of the file (a tenth of a cold scan of sglang)."""
    position = source.find("register_")
    while position >= 0:
        match = _REGISTER.match(source, position)
        if match is None:
            position = source.find("register_", position + 1)
        else:
            yield match
            position = source.find("register_", match.end())


def _call_at(source: str, start: int) -> ast.Call | LiteralCall | None:
    """The registration call starting at `start`, read as `_literal_call` when it is one
    of plain keyword literals, else parsed; None when unsure."""
    if _in_docstring(source, start):
        return None
    end = _statement_end(source, start)
    line = source.count("\n", 0, start) + 1
    call = _literal_call(source[start:end], line)
    if call is not None:
        return call
    # Padding with newlines keeps line numbers without walking the tree afterwards.
    statement = _one_statement("\n" * (line - 1) + source[start:end])
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return statement.value
    return None


# Python's own literals, restricted to forms whose value is their text (no escapes, no
# prefixes, no leading zeros, no underscores, at most 18 digits a side).
_LITERAL = (
    r'"[^"\\\n\r\x00]*+"|' + r"'[^'\\\n\r\x00]*+'|True|False|None"
    r"|(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,18})?"
)
# Blanks, newlines and comments between tokens (possessive: linear on any text).
_GAP = r"(?:[ \t\n]++|#[^\n\r\x00]*+)*+"
_KEYWORD = re.compile(rf"([a-z][a-z0-9_]*)[ \t]*=[ \t]*({_LITERAL})")
_ARGUMENT = re.compile(rf"{_GAP},?{_GAP}{_KEYWORD.pattern}")
# A statement that is one call of keyword literals, then only blanks and comments.
_LITERAL_CALL = re.compile(
    rf"(register_[a-z]+_ci)\(({_GAP}(?:{_KEYWORD.pattern}{_GAP},{_GAP})*+"
    rf"(?:{_KEYWORD.pattern}{_GAP})?)\)[ \t]*+(?:#[^\n\r\x00]*+)?(?:\n[ \t]*+(?:#[^\n\r\x00]*+)?)*+"
)


def _literal_call(text: str, line: int) -> LiteralCall | None:
    """`text` read as the call at `line`, without parsing it, when it is a call of keyword
    literals only (`register_cuda_ci(est_time=60, suite="x")`: most registrations; a parse
    costs ~35 us, a third of a file's scan); None for anything else, which is parsed."""
    whole = _LITERAL_CALL.fullmatch(text)
    if whole is None:
        return None
    pairs = _keywords(whole.group(2))
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names) or any(keyword.iskeyword(name) for name in names):
        return None  # Python refuses it (a keyword given twice, `if=`): the parse says so
    return LiteralCall(
        whole.group(1), line, tuple((name, _value(literal)) for name, literal in pairs)
    )


def _keywords(arguments: str) -> list[tuple[str, str]]:
    """(name, literal) of each keyword argument, in order, of arguments `_LITERAL_CALL`
    matched: each taken where the one before ended (a comment's text is never read)."""
    found = []
    position = 0
    while (argument := _ARGUMENT.match(arguments, position)) is not None:
        found.append((argument.group(1), argument.group(2)))
        position = argument.end()
    return found


_CONSTANTS = {"True": True, "False": False, "None": None}


def _value(literal: str) -> Literal:
    if literal[0] in "\"'":
        return literal[1:-1]
    if literal in _CONSTANTS:
        return _CONSTANTS[literal]
    return float(literal) if "." in literal else int(literal)


def _statement_end(source: str, start: int) -> int:
    """Where the statement at `start` ends: the next top-level line that is not an `else`
    or `elif` continuing it, or the end of the source."""
    for match in _TOP_LEVEL_LINE.finditer(source, source.find("\n", start) + 1 or len(source)):
        if not source.startswith(("else", "elif"), match.start()):
            return match.start()
    return len(source)


def _main_block_at(source: str, start: int) -> ast.stmt | None:
    """The one statement from `start` (a main block, `else`/`elif` included), parsed once
    per distinct text and shared (line numbers from 1: read it, never change it; most files
    end with the same two lines); None when unsure."""
    if _in_docstring(source, start):
        return None
    return _shared_statement(source[start : _statement_end(source, start)])


def _in_docstring(source: str, start: int) -> bool:
    """Whether `start` may sit inside a triple-quoted string: an odd number before it."""
    return bool(source.count('"""', 0, start) % 2 or source.count("'''", 0, start) % 2)


@functools.lru_cache(maxsize=256)
def _shared_statement(text: str) -> ast.stmt | None:
    return _one_statement(text)


def _one_statement(text: str) -> ast.stmt | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def _line_starts(source: str, needle: str) -> list[int]:
    """Positions of `needle` (which starts with a newline) just after its newline."""
    found = [0] if source.startswith(needle[1:]) else []
    position = source.find(needle)
    while position >= 0:
        found.append(position + 1)
        position = source.find(needle, position + 1)
    return found

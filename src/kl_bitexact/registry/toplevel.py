"""Find a test file's top-level registration calls and main block without parsing the file.

`ast.parse` of a 10 KB test file costs ~10 ms; sglang's test/registered/ holds ~3,600 of
them. The registration calls and the `if __name__ == "__main__":` block are top-level
statements (they start at column 0), so only their own text needs parsing: each candidate
is cut out up to the next line that starts at column 0, and only that slice is parsed.
Anything unusual returns None and the caller parses the whole file, which is exact: a
call that does not start a line (nested, assigned, or in a comment or string), a candidate
after an odd number of triple quotes (it may sit inside a docstring), a slice that is not
exactly one statement of the expected kind, a file without any candidate.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

_REGISTER = re.compile(r"register_\w+_ci\s*\(")
_MAIN = "\nif __name__"  # a plain search: a `^` regex tries every line and costs 10x
# A line starting at column 0 with code (not blank, not a comment, not the closing bracket
# of a multi-line call): the next statement.
_TOP_LEVEL_LINE = re.compile(r"^[^\s#)\]}]", re.MULTILINE)


@dataclass(frozen=True)
class TopLevel:
    calls: tuple[ast.Call, ...]  # register_*_ci calls, line numbers as in the file
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
        statement = _statement_at(source, start)
        if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
            return None
        calls.append(statement.value)
    if not calls:
        return None
    blocks = []
    for start in _line_starts(source, _MAIN):
        statement = _statement_at(source, start, numbered=False)
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


def _statement_at(source: str, start: int, numbered: bool = True) -> ast.stmt | None:
    """The one statement from `start` up to the next top-level line (or `else`/`elif`
    continuing it), with the file's line numbers (`numbered`; else parsed once per distinct
    text and shared: read it, never change it); None when unsure."""
    if source.count('"""', 0, start) % 2 or source.count("'''", 0, start) % 2:
        return None  # maybe inside a docstring
    end = len(source)
    for match in _TOP_LEVEL_LINE.finditer(source, source.find("\n", start) + 1 or end):
        if not source.startswith(("else", "elif"), match.start()):
            end = match.start()
            break
    if not numbered:  # main blocks: most files end with the same two lines
        return _shared_statement(source[start:end])
    line = source.count("\n", 0, start)
    # Padding with newlines keeps line numbers without walking the tree afterwards.
    return _one_statement("\n" * line + source[start:end])


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

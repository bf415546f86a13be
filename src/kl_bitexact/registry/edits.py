"""Text edits shared by the Python and YAML fixers: positions, insertion, failure."""

from __future__ import annotations

from dataclasses import dataclass


class EditError(Exception):
    """An automatic edit could not be made safely; the file is left as it was."""


@dataclass(frozen=True)
class Insertion:
    line: int  # 0-based line index
    column: int  # 0-based character offset within the line
    text: str


def insert(source: str, insertion: Insertion) -> str:
    lines = source.splitlines(keepends=True)
    if insertion.line == len(lines):
        lines.append("")
    line = lines[insertion.line]
    lines[insertion.line] = line[: insertion.column] + insertion.text + line[insertion.column :]
    return "".join(lines)


def line_after(source: str, line: int) -> Insertion:
    """Where a whole new line goes after 0-based `line` (which may lack a newline)."""
    lines = source.splitlines(keepends=True)
    if lines[line].endswith("\n"):
        return Insertion(line + 1, 0, "")
    return Insertion(line, len(lines[line]), "\n")


def insert_line_after(source: str, line: int, text: str) -> str:
    """Insert `text` (one or more lines, no final newline) after 0-based `line`."""
    where = line_after(source, line)
    body = where.text + text + ("\n" if where.text == "" else "")
    return insert(source, Insertion(where.line, where.column, body))


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]

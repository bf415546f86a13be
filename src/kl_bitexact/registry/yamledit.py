"""Append an item to a YAML sequence with a minimal text edit.

ruamel.yaml's round-trip loader locates the sequence (lines, columns, flow or block style,
the quoting of the sibling items); the new item is then inserted as text in the siblings'
style, because dumping the whole document would also re-space every untouched flow
mapping. The edited text is loaded again and must equal the old document plus the item.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from kl_bitexact.registry import yamlio
from kl_bitexact.registry.edits import EditError, Insertion, indentation, insert, insert_line_after

_PLAIN = re.compile(r"[A-Za-z0-9_./@][A-Za-z0-9_./@-]*")
_AMBIGUOUS = re.compile(r"(?i:true|false|yes|no|on|off|null|~|[-+]?[0-9._]+(e[-+]?[0-9]+)?)")


def append(text: str, path: str, keys: Sequence[str], item: Any) -> str:
    """`text` with `item` appended to the sequence at `keys` (created when only the last
    key is missing from an existing top-level mapping)."""
    document = yamlio.load_round_trip(text, path)
    parent = _walk(document, keys[:-1], path)
    sequence = parent.get(keys[-1]) if isinstance(parent, CommentedMap) else None
    missing = not isinstance(parent, CommentedMap) or keys[-1] not in parent
    if missing and len(keys) == 1:
        edited = _new_top_level_list(text, keys[0], item)
    elif isinstance(sequence, CommentedSeq) and sequence:
        edited = _append_to(text, sequence, item)
    else:
        raise EditError(f"{path}: {'.'.join(keys)} is not a non-empty list to extend")
    _verify(text, edited, path, keys, item)
    return edited


def add_word(text: str, path: str, keys: Sequence[str], word: str) -> str:
    """`text` with ` word` appended to the one-line string at `keys` (a space-separated
    list, such as the reusable workflow's `suites:` input), inside its quotes if any."""
    document = yamlio.load_round_trip(text, path)
    parent = _walk(document, keys[:-1], path)
    value = parent.get(keys[-1]) if isinstance(parent, CommentedMap) else None
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise EditError(f"{path}: {'.'.join(keys)} is not a one-line string to extend")
    line, column = parent.lc.value(keys[-1])
    current = text.splitlines(keepends=True)[line]
    end = _scalar_end(current, column)
    if current[column] in "'\"":
        end -= 1  # inside the closing quote
    # `word` is a checked suite name (lint.SAFE_SUITE_NAME): safe inside any scalar style.
    edited = insert(text, Insertion(line, end, f" {word}"))
    if yamlio.plain(_walk(yamlio.load_round_trip(edited, path), keys, path)) != f"{value} {word}":
        raise EditError(f"{path}: the edit would change more than {'.'.join(keys)}")
    return edited


def _walk(document: Any, keys: Sequence[str], path: str) -> Any:
    node = document
    for key in keys:
        if not isinstance(node, CommentedMap) or key not in node:
            raise EditError(f"{path}: no `{'.'.join(keys)}` to extend")
        node = node[key]
    return node


def _new_top_level_list(text: str, key: str, item: Any) -> str:
    separator = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{separator}{key}:\n  - {render_scalar(item)}\n"


def _append_to(text: str, sequence: CommentedSeq, item: Any) -> str:
    lines = text.splitlines(keepends=True)
    last = len(sequence) - 1
    line, column = sequence.lc.item(last)
    if sequence.fa.flow_style():
        end = _scalar_end(lines[line], column)
        return insert(text, Insertion(line, end, f", {render_scalar(item)}"))
    dash = lines[line].rfind("-", 0, column)
    if dash < 0:
        raise EditError("cannot locate the list's dash")
    rendered = _render_item(sequence[last], lines[line], item, dash)
    return insert_line_after(text, _item_last_line(lines, line, dash), rendered)


def _render_item(sibling: Any, sibling_line: str, item: Any, dash: int) -> str:
    prefix = " " * dash + "- "
    if not isinstance(item, dict):
        return prefix + render_scalar(item, like=sibling)
    models = sibling if isinstance(sibling, dict) else {}
    pairs = [(key, render_scalar(value, like=models.get(key))) for key, value in item.items()]
    if isinstance(sibling, CommentedMap) and sibling.fa.flow_style():
        spaced = "{ " in sibling_line
        body = ", ".join(f"{key}: {value}" for key, value in pairs)
        return prefix + ("{ " + body + " }" if spaced else "{" + body + "}")
    key_indent = " " * (dash + 2)
    lines = [f"{key}: {value}" for key, value in pairs]
    return prefix + ("\n" + key_indent).join(lines)


def _item_last_line(lines: list[str], start: int, dash: int) -> int:
    """The last line of the block item starting at `start` (trailing comments excluded)."""
    last = start
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(indentation(lines[index])) <= dash:
            break
        last = index
    return last


def _scalar_end(line: str, column: int) -> int:
    """End column of the flow-sequence scalar starting at `column`."""
    if line[column] in "'\"":
        end = line.find(line[column], column + 1)
        return end + 1 if end > 0 else len(line)
    match = re.compile(r"[^,\]\n#]*").match(line, column)
    assert match is not None
    return column + len(match.group(0).rstrip())


def render_scalar(value: Any, like: Any = None) -> str:
    """A YAML scalar for `value`, quoted the way `like` (a sibling value) was."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if isinstance(value, (DoubleQuotedScalarString, SingleQuotedScalarString)):
        like = value  # a value copied from a sibling keeps its own quoting
    if "\n" in text or "\r" in text:
        raise EditError(f"refusing to write a multi-line value {text!r}")
    if isinstance(like, DoubleQuotedScalarString):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(like, SingleQuotedScalarString) or not _plain_safe(text):
        return "'" + text.replace("'", "''") + "'"
    return text


def _plain_safe(text: str) -> bool:
    return bool(_PLAIN.fullmatch(text)) and not _AMBIGUOUS.fullmatch(text)


def _verify(before: str, after: str, path: str, keys: Sequence[str], item: Any) -> None:
    expected = yamlio.plain(yamlio.load_round_trip(before, path)) or {}
    node = expected
    for key in keys[:-1]:
        node = node[key]
    node.setdefault(keys[-1], []).append(item)
    if yamlio.plain(yamlio.load_round_trip(after, path)) != expected:
        raise EditError(f"{path}: the edit would change more than the one new list item")

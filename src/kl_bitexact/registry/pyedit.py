"""Add a suite to an sglang-style allowlist dict literal with a minimal text edit.

Only the characters of the new item (and a separating comma where the list lacked a
trailing one) are inserted; comments, quotes and layout of everything else stay as they
are. The result is parsed again and must hold exactly the old entries plus the new one.
"""

from __future__ import annotations

import ast

from kl_bitexact.registry import allowlists
from kl_bitexact.registry.edits import EditError, Insertion, indentation, insert, insert_line_after


def add_suite(source: str, path: str, group: str, backend: str, suite: str) -> str:
    """`source` with `suite` appended to `group[backend]` (the key is created if absent)."""
    mapping = _find_dict(source, path, group)
    for key, value in zip(mapping.keys, mapping.values, strict=True):
        if allowlists.backend_of(key) == backend:
            if not isinstance(value, (ast.List, ast.Tuple)):
                raise EditError(f"{path}: {group}[{backend}] is not a list literal")
            edited = _append_to_list(source, value, suite)
            break
    else:
        edited = _add_key(source, mapping, backend, suite)
    _verify(source, edited, path, (suite, backend, group))
    return edited


def _find_dict(source: str, path: str, group: str) -> ast.Dict:
    for name, mapping in allowlists.suite_dicts(ast.parse(source, filename=path)):
        if name == group:
            return mapping
    raise EditError(f"{path}: no top-level `{group} = {{...}}` dict literal to extend")


def _append_to_list(source: str, sequence: ast.List | ast.Tuple, suite: str) -> str:
    lines = source.splitlines(keepends=True)
    close_line, close_col = _end(sequence)
    if not sequence.elts:
        return insert(source, Insertion(close_line, close_col - 1, _quoted(suite, '"')))
    last = sequence.elts[-1]
    last_line, last_col = _end(last)
    quote = _quote_of(source, last)
    if close_line == last_line:  # `["a", "b"]` or `["a",\n "b"]`: add inline
        return insert(source, Insertion(last_line, last_col, f", {_quoted(suite, quote)}"))
    # One item per line: a new line after the last item's line (its comment stays there).
    indent = indentation(lines[last.lineno - 1])
    with_comma = _ensure_comma(source, last_line, last_col)
    return insert_line_after(with_comma, last_line, f"{indent}{_quoted(suite, quote)},")


def _add_key(source: str, mapping: ast.Dict, backend: str, suite: str) -> str:
    if not mapping.keys or mapping.keys[0] is None:
        raise EditError("the dict has no backend key to model a new one on")
    first = mapping.keys[0]
    entry = f"{_key_text(source, first, backend)}: [{_quoted(suite, _quote_of(source, first))}]"
    last_value = mapping.values[-1]
    close_line, _ = _end(mapping)
    last_line, last_col = _end(last_value)
    if close_line == last_line:
        return insert(source, Insertion(last_line, last_col, f", {entry}"))
    indent = indentation(source.splitlines()[first.lineno - 1])
    with_comma = _ensure_comma(source, last_line, last_col)
    return insert_line_after(with_comma, last_line, f"{indent}{entry},")


def _key_text(source: str, model: ast.expr, backend: str) -> str:
    if isinstance(model, ast.Attribute):
        return f"{ast.get_source_segment(source, model.value)}.{backend.upper()}"
    if isinstance(model, ast.Name):
        return backend.upper()
    return _quoted(backend, _quote_of(source, model))


def _ensure_comma(source: str, line: int, column: int) -> str:
    rest = source.splitlines(keepends=True)[line][column:]
    if rest.lstrip(" \t").startswith(","):
        return source
    return insert(source, Insertion(line, column, ","))


def _end(node: ast.expr) -> tuple[int, int]:
    """0-based (line, column) just after `node`."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    line = node.end_lineno - 1
    return line, node.end_col_offset


def _quote_of(source: str, node: ast.expr) -> str:
    text = ast.get_source_segment(source, node) or '"'
    return "'" if text.startswith("'") else '"'


def _quoted(text: str, quote: str) -> str:
    # Suite names are checked against lint.SAFE_SUITE_NAME before any edit, so no escaping
    # is needed; refuse anything that would need it rather than write it.
    if quote in text or "\\" in text or "\n" in text:
        raise EditError(f"refusing to write {text!r} into Python source")
    return f"{quote}{text}{quote}"


def _verify(before: str, after: str, path: str, added: tuple[str, str, str]) -> None:
    old = {(e.suite, e.backend, e.group) for e in allowlists.read_python(before, path).entries}
    new = {(e.suite, e.backend, e.group) for e in allowlists.read_python(after, path).entries}
    if new != old | {added} or ast.dump(_without_dicts(before)) != ast.dump(_without_dicts(after)):
        raise EditError(f"{path}: the edit would change more than the one allowlist entry")


def _without_dicts(source: str) -> ast.Module:
    """The module with the suite dicts emptied: everything else must be unchanged."""
    tree = ast.parse(source)
    for _, mapping in allowlists.suite_dicts(tree):
        mapping.keys, mapping.values = [], []
    return tree

"""Reading YAML with positions: ruamel.yaml's round-trip loader keeps line numbers (and
comments and styles, which `yamledit` relies on when it writes)."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted import yamlbounds


def load(text: str, path: str) -> Any:
    """The round-trip document of `text`; a syntax error names the file and line."""
    try:
        yamlbounds.check(YAML(typ="rt").parse(text), path)
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{path}{line}: not valid YAML ({problem.problem or problem.context})",
            hint="fix the YAML syntax at that line (indentation, quotes, a missing ':')",
        ) from None
    except YAMLError as problem:  # e.g. a control character the reader refuses
        first = str(problem).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML ({first})") from None


def plain(node: Any) -> Any:
    """The same data as plain dicts, lists and scalars (for comparisons)."""
    if isinstance(node, dict):
        return {str(key): plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [plain(item) for item in node]
    if isinstance(node, str):
        return str(node)
    return node


def key_line(mapping: Any, key: str) -> int | None:
    """1-based line of `key` in a round-trip mapping, None when unknown."""
    if isinstance(mapping, CommentedMap) and key in mapping:
        return int(mapping.lc.key(key)[0]) + 1
    return None


def item_line(sequence: Any, index: int) -> int | None:
    """1-based line of item `index` in a round-trip sequence, None when unknown."""
    if isinstance(sequence, CommentedSeq) and 0 <= index < len(sequence):
        return int(sequence.lc.item(index)[0]) + 1
    return None


def node_line(node: Any) -> int | None:
    """1-based line where a round-trip mapping or sequence starts."""
    if isinstance(node, (CommentedMap, CommentedSeq)):
        return int(node.lc.line) + 1
    return None

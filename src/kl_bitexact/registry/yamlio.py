"""Reading YAML with positions.

`load` reads with PyYAML's C parser (libyaml; its pure-Python parser where the C one is
missing) into dicts and lists that remember where each key, item and node starts: the
lint reads 80-odd workflows per run, and ruamel.yaml's pure-Python round-trip parser took
3 s of a 4 s cold run for them. The bounds of `untrusted.yamlbounds` are checked on the C
parser's events first (the composer recurses, so depth is checked before it runs), and
scalars resolve as YAML 1.2's core schema does (as ruamel.yaml and GitHub do): `on`,
`yes`, `no` stay strings, no sexagesimal numbers, no timestamps.

`load_round_trip` is ruamel.yaml's round-trip loader, which keeps comments and styles: only
`--fix`'s edits (`yamledit`) need it.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

import yaml

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted import yamlbounds

_FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict[Any, Any]):
    """A mapping that knows its own line and each key's (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]
    value_lines: dict[Any, int]
    block_values: frozenset[Any]  # keys whose value is a block scalar (`|`, `>`)


class LineList(list[Any]):
    """A sequence that knows its own line and each item's (1-based)."""

    line: int = 0
    item_lines: list[int]


class _Resolver(yaml.resolver.Resolver):
    """YAML 1.2 core schema scalars (PyYAML's own follow YAML 1.1)."""

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 - PyYAML's class table


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Resolver.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


_C_PARSER: Any = getattr(yaml.cyaml, "CParser", None) if yaml.__with_libyaml__ else None

if _C_PARSER is not None:

    class _Composer(_C_PARSER, _Resolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _C_PARSER.__init__(self, stream)
            _Resolver.__init__(self)

else:  # pragma: no cover - PyYAML built without libyaml: its pure-Python parser

    class _Composer(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _Resolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Resolver.__init__(self)


def _int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    return int(text, 16) if text.startswith("0x") else int(text)


def _float(text: str) -> float:
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    return math.nan if lowered == ".nan" else float(text)


_SCALARS: dict[str, Any] = {
    "tag:yaml.org,2002:str": str,
    "tag:yaml.org,2002:null": lambda text: None,
    "tag:yaml.org,2002:bool": lambda text: text.lower() == "true",
    "tag:yaml.org,2002:int": _int,
    "tag:yaml.org,2002:float": _float,
}
_MERGE = "tag:yaml.org,2002:merge"


def _build(node: Any, built: dict[int, Any]) -> Any:
    """Plain data from a composed node (PyYAML's constructor, generic and slow, is not used:
    aliases share their collection, `<<` merges, a duplicate key is an error)."""
    if isinstance(node, yaml.ScalarNode):
        convert = _SCALARS.get(node.tag)
        if convert is None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"a value tagged {node.tag!r}, which plain data does not hold",
                node.start_mark,
            )
        return convert(node.value)
    if id(node) in built:
        return built[id(node)]
    if isinstance(node, yaml.SequenceNode):
        items = LineList()
        built[id(node)] = items
        items.line = node.start_mark.line + 1
        items.item_lines = [item.start_mark.line + 1 for item in node.value]
        items.extend(_build(item, built) for item in node.value)
        return items
    return _build_mapping(node, built)


def _build_mapping(node: Any, built: dict[int, Any]) -> LineDict:
    data = LineDict()
    built[id(node)] = data
    data.line = node.start_mark.line + 1
    data.key_lines, data.value_lines = {}, {}
    block = set()
    merged: list[Any] = []
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE:
            merged += (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            continue
        key = _build(key_node, built)
        try:
            duplicate = key in data
        except TypeError:
            raise _problem(node, key_node, "found an unhashable key") from None
        if duplicate:
            raise _problem(node, key_node, f"found duplicate key {key!r}")
        data[key] = _build(value_node, built)
        data.key_lines[key] = key_node.start_mark.line + 1
        data.value_lines[key] = value_node.start_mark.line + 1
        if isinstance(value_node, yaml.ScalarNode) and value_node.style in ("|", ">"):
            block.add(key)
    for source in merged:  # `<<: *defaults`: keys given here win
        other = _build(source, built)
        if not isinstance(other, LineDict):
            raise _problem(node, source, "a merge key needs a mapping")
        for key, value in other.items():
            if key not in data:
                data[key] = value
                data.key_lines[key] = other.key_lines[key]
                data.value_lines[key] = other.value_lines[key]
    data.block_values = frozenset(block)
    return data


def _problem(node: Any, at: Any, what: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        "while constructing a mapping", node.start_mark, what, at.start_mark
    )


def load(text: str, path: str) -> Any:
    """The document of `text`, with positions; a syntax error names the file and line."""
    try:
        yamlbounds.check(yaml.parse(text, Loader=_FAST), path)
        node = yaml.compose(text, Loader=_Composer)
        return None if node is None else _build(node, {})
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        if "maximum nesting depth" in str(problem.problem):  # libyaml's own stop, further in
            line = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(
                f"{path}{line}: nested more than {yamlbounds.MAX_DEPTH} levels deep: not read",
                hint="no workflow or allowlist needs this; check where the file came from",
            ) from None
        raise _invalid(path, mark, problem) from None
    except yaml.YAMLError as problem:
        first = str(problem).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    except (ValueError, OverflowError) as problem:  # a scalar a constructor refuses
        raise ConfigError(f"{path}: not valid YAML ({problem})") from None


def _invalid(path: str, mark: Any, problem: Any) -> ConfigError:
    line = f":{mark.line + 1}" if mark is not None else ""
    return ConfigError(
        f"{path}{line}: not valid YAML ({problem.problem or problem.context})",
        hint="fix the YAML syntax at that line (indentation, quotes, a missing ':')",
    )


def load_round_trip(text: str, path: str) -> Any:
    """ruamel.yaml's round-trip document of `text` (comments and styles kept), for edits."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        yamlbounds.check(YAML(typ="rt").parse(text), path)
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as problem:
        raise _invalid(path, problem.problem_mark or problem.context_mark, problem) from None
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


def _round_trip(node: Any, kind: str) -> bool:
    """Whether `node` is ruamel.yaml's CommentedMap / CommentedSeq (never, unless an edit
    loaded ruamel.yaml: it is not imported for reading)."""
    comments = sys.modules.get("ruamel.yaml.comments")
    return comments is not None and isinstance(node, getattr(comments, kind))


def key_line(mapping: Any, key: Any) -> int | None:
    """1-based line of `key` in a loaded mapping, None when unknown."""
    if isinstance(mapping, LineDict):
        return mapping.key_lines.get(key)
    if _round_trip(mapping, "CommentedMap") and key in mapping:
        return int(mapping.lc.key(key)[0]) + 1
    return None


def script_line(mapping: Any, key: Any) -> int | None:
    """1-based line where the text of `mapping[key]` starts: the line after the key for a
    block scalar (`run: |`), else the value's own."""
    if isinstance(mapping, LineDict) and key in mapping.value_lines:
        return mapping.value_lines[key] + (1 if key in mapping.block_values else 0)
    line = key_line(mapping, key)
    return line


def item_line(sequence: Any, index: int) -> int | None:
    """1-based line of item `index` in a loaded sequence, None when unknown."""
    if isinstance(sequence, LineList):
        return sequence.item_lines[index] if 0 <= index < len(sequence.item_lines) else None
    if _round_trip(sequence, "CommentedSeq") and 0 <= index < len(sequence):
        return int(sequence.lc.item(index)[0]) + 1
    return None


def node_line(node: Any) -> int | None:
    """1-based line where a loaded mapping or sequence starts."""
    if isinstance(node, (LineDict, LineList)):
        return node.line
    if _round_trip(node, "CommentedMap") or _round_trip(node, "CommentedSeq"):
        return int(node.lc.line) + 1
    return None

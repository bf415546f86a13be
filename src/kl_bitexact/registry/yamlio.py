"""Reading YAML with positions.

`load` reads with PyYAML's C parser (libyaml; its pure-Python parser where the C one is
missing) into dicts and lists that remember where each key, item and node starts: the
lint reads 80-odd workflows per run, and ruamel.yaml's pure-Python round-trip parser took
3 s of a 4 s cold run for them. The bounds of `untrusted.yamlbounds` are checked on the C
parser's events as the document is built from them, in one pass; anything unusual is read
again by `load_checked`, which checks the bounds on the events first (the composer
recurses, so depth is checked before it runs), then composes and builds. Scalars resolve
as YAML 1.2's core schema does (as ruamel.yaml and GitHub do): `on`, `yes`, `no` stay
strings, no sexagesimal numbers, no timestamps.

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
        return one_pass(text)
    except (Unusual, yaml.YAMLError, ValueError, OverflowError, TypeError):
        return load_checked(text, path)  # it names the problem, or reads what is unusual


def one_pass(text: str) -> Any:
    """`text`'s document read in one pass (`_OnePass`); Unusual (or the parser's error)
    for anything it leaves to `load_checked`."""
    return _OnePass(text).document()


def load_checked(text: str, path: str) -> Any:
    """`load` in three passes: the bounds on the parser's events, then compose, then build;
    exact about what is wrong and where."""
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


class Unusual(Exception):
    """Something `_OnePass` leaves to `_load_checked`, which reads it or names the problem."""


_NO_KEY = object()
_RESOLVERS = _Resolver.yaml_implicit_resolvers  # first character -> [(tag, pattern)]
_STR = "tag:yaml.org,2002:str"


def _resolved(plain: str) -> Any:
    """A plain scalar's value by YAML 1.2's core schema, as `_Resolver` and `_build` make it."""
    tag = next((t for t, p in _RESOLVERS[plain[:1]] if p.match(plain)), _STR)
    convert = _SCALARS.get(tag)
    if convert is None:
        raise Unusual("a merge key")
    return convert(plain)


# Plain scalars already resolved: a few hundred distinct ones (`name`, `true`, `60`) are
# most of those a resolver looks at in sglang's workflows. Floats are not kept: each NaN
# is its own key, as the checked reader builds them.
_RESOLVED: dict[str, Any] = {}
_MAX_RESOLVED = 10_000


def _resolved_once(plain: str) -> Any:
    found = _RESOLVED.get(plain, _NO_KEY)
    if found is _NO_KEY:
        found = _resolved(plain)
        if not isinstance(found, float) and len(_RESOLVED) < _MAX_RESOLVED:
            _RESOLVED[plain] = found
    return found


class _Open:
    """A mapping or sequence being built: its lines, anchor, the key waiting for its value,
    and the node count when it started (its size for the bounds is the count since)."""

    __slots__ = ("anchor", "block", "data", "is_list", "key", "key_line", "lines", "started")

    def __init__(self, data: LineDict | LineList, anchor: str | None, started: int) -> None:
        self.data: Any = data
        self.anchor, self.started = anchor, started
        self.is_list = isinstance(data, LineList)
        self.lines: Any = data.item_lines if isinstance(data, LineList) else data.key_lines
        self.key: Any = _NO_KEY
        self.key_line = 0
        self.block: set[Any] = set()


_BLOCK_STYLES = ("|", ">")


class _OnePass:
    """The bounds checked and the document built in one walk over the parser's events:
    what `_load_checked` returns, for a third of its cost (sglang's 100 workflows are read
    on every cold run). Anything unusual raises and the checked reader takes over: a bound
    crossed (so that it is named there), a syntax error, an explicit tag, a merge key, a
    duplicate key or anchor, an undefined alias, a key that is not a scalar, a second
    document.

    Scalars are most of the events (25,000 in sglang's workflows), so the loop handles
    them itself, without a call per event; the node count is checked when a collection
    ends or an alias is expanded (a scalar adds one node: only they can cross it fast)."""

    def __init__(self, text: str) -> None:
        self.parser = _FAST(text)
        self.open: list[_Open] = []
        # anchor -> (value, line, is a block scalar, nodes once expanded)
        self.anchors: dict[str, tuple[Any, int, bool, int]] = {}
        self.total = 0
        self.result: Any = None
        self.documents = 0

    def document(self) -> Any:
        try:
            self._events()
        finally:
            self.parser.dispose()
        if self.total > yamlbounds.MAX_NODES:
            raise Unusual("too many nodes: the bounds name it")
        return self.result

    def _events(self) -> None:
        handlers = {
            yaml.MappingStartEvent: self._start,
            yaml.SequenceStartEvent: self._start,
            yaml.MappingEndEvent: self._end,
            yaml.SequenceEndEvent: self._end,
            yaml.AliasEvent: self._alias,
            yaml.DocumentStartEvent: self._document,
        }
        next_event, stack, scalar_event = self.parser.get_event, self.open, yaml.ScalarEvent
        resolvers, digits = _RESOLVERS, yamlbounds.MAX_NUMBER_DIGITS
        while (kind := type(event := next_event())) is not yaml.StreamEndEvent:
            if kind is not scalar_event:
                if (handler := handlers.get(kind)) is not None:
                    handler(event)
                continue
            value = event.value
            if event.tag is not None:
                raise Unusual("a tag")
            if len(value) > digits and yamlbounds.number_too_long(value, event.style):
                raise Unusual("a number the bounds refuse")
            if event.implicit[0] and value[:1] in resolvers:  # plain, maybe not a string
                value = _resolved_once(value)
            self.total += 1
            line, block = event.start_mark.line + 1, event.style in _BLOCK_STYLES
            if event.anchor is not None:
                self._anchor(event.anchor, value, line, block, 1)
            if not stack:
                self.result = value
                continue
            frame = stack[-1]
            if frame.is_list:
                frame.data.append(value)
                frame.lines.append(line)
            elif frame.key is _NO_KEY:
                if value in frame.data:
                    raise Unusual("a duplicate key")
                frame.key, frame.key_line = value, line
            else:
                self._value(frame, value, line, block)

    def _document(self, event: Any) -> None:
        self.documents += 1
        if self.documents > 1:
            raise Unusual("a second document")

    def _start(self, event: Any) -> None:
        if event.tag is not None or len(self.open) >= yamlbounds.MAX_DEPTH:
            raise Unusual("a tag, or nested deeper than the bounds allow")
        data: LineDict | LineList
        if isinstance(event, yaml.MappingStartEvent):
            data = LineDict()
            data.key_lines, data.value_lines = {}, {}
        else:
            data = LineList()
            data.item_lines = []
        data.line = event.start_mark.line + 1
        self.open.append(_Open(data, event.anchor, self.total))
        self.total += 1  # itself: counted into its parent's size when it ends

    def _end(self, event: Any) -> None:
        frame = self.open.pop()
        data = frame.data
        if isinstance(data, LineDict):
            data.block_values = frozenset(frame.block)
        if self.total > yamlbounds.MAX_NODES:
            raise Unusual("too many nodes: the bounds name it")
        self._anchor(frame.anchor, data, data.line, False, self.total - frame.started)
        self._add(data, data.line, False)

    def _alias(self, event: Any) -> None:
        found = self.anchors.get(event.anchor)
        if found is None:  # undefined, or inside the node it names (a loop)
            raise Unusual("an alias the checked reader names")
        value, line, block, size = found
        self.total += size
        if self.total > yamlbounds.MAX_NODES:
            raise Unusual("too many nodes: the bounds name it")
        self._add(value, line, block)

    def _anchor(self, anchor: str | None, value: Any, line: int, block: bool, size: int) -> None:
        if anchor is None:
            return
        if anchor in self.anchors or any(frame.anchor == anchor for frame in self.open):
            raise Unusual("an anchor given twice")
        self.anchors[anchor] = (value, line, block, size)

    def _add(self, value: Any, line: int, block: bool) -> None:
        """A collection or an alias's value as the next item, key or value."""
        if not self.open:
            self.result = value
            return
        frame = self.open[-1]
        if frame.is_list:
            frame.data.append(value)
            frame.lines.append(line)
        elif frame.key is _NO_KEY:
            if isinstance(value, (dict, list)) or value in frame.data:
                raise Unusual("a key that is not a scalar, or a duplicate key")
            frame.key, frame.key_line = value, line
        else:
            self._value(frame, value, line, block)

    @staticmethod
    def _value(frame: _Open, value: Any, line: int, block: bool) -> None:
        """The value of the key `frame` holds."""
        key = frame.key
        frame.data[key] = value
        frame.lines[key] = frame.key_line
        frame.data.value_lines[key] = line
        if block:
            frame.block.add(key)
        frame.key = _NO_KEY


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

"""Bounds on a YAML document, checked on its parse events before anything is built.

A YAML file can be small and still hostile: nested thousands deep (the composer and every
reader after it recurse), an alias bomb (nine anchors each listing the previous one nine
times expand to a billion nodes), an alias inside the node it names (a merge-key loop:
`&a {<<: *a}`), or a 6,000-digit integer (Python refuses past 4,300 digits with a
ValueError). The events of PyYAML's and ruamel.yaml's parsers have the same names and
fields, so one check serves the suite loader and `lint-ci` alike; the caller passes its
library's event stream (lazy: a syntax error surfaces from the caller's own parser).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kl_bitexact.errors import ConfigError

MAX_DEPTH = 64
MAX_NODES = 200_000  # after expanding aliases; a large workflow has a few thousand
MAX_NUMBER_DIGITS = 100
_NUMBER = re.compile(r"[-+]?[0-9][0-9_:.xXoObBa-fA-F]*")
_STARTS = {"SequenceStartEvent", "MappingStartEvent"}
_ENDS = {"SequenceEndEvent", "MappingEndEvent"}


def check(events: Iterable[Any], source: str) -> None:
    """Raise a ConfigError naming `source` and the line when a bound is exceeded."""
    open_nodes: list[list[Any]] = [[None, 0]]  # [anchor, nodes so far] per open collection
    sizes: dict[str, int] = {}
    total = 0
    for event in events:
        kind = type(event).__name__
        added = 0
        if kind in _STARTS:
            open_nodes.append([event.anchor, 1])
            added = 1
            if len(open_nodes) - 1 > MAX_DEPTH:
                raise _refuse(source, event, f"nested more than {MAX_DEPTH} levels deep")
        elif kind in _ENDS:
            anchor, size = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = size
            open_nodes[-1][1] += size
        elif kind == "ScalarEvent":
            _check_scalar(event, source)
            if event.anchor is not None:
                sizes[event.anchor] = 1
            open_nodes[-1][1] += 1
            added = 1
        elif kind == "AliasEvent":
            if any(frame[0] == event.anchor for frame in open_nodes):
                raise _refuse(
                    source, event, f"the alias *{event.anchor} is inside the node it names (a loop)"
                )
            added = sizes.get(event.anchor, 1)
            open_nodes[-1][1] += added
        total += added
        if total > MAX_NODES:
            raise _refuse(
                source, event, f"more than {MAX_NODES} nodes once its aliases are expanded"
            )


def number_too_long(value: str, style: str | None) -> bool:
    """Whether a scalar is a plain number of more than MAX_NUMBER_DIGITS digits."""
    plain = style is None or style == ""
    if not plain or len(value) <= MAX_NUMBER_DIGITS or not _NUMBER.fullmatch(value):
        return False
    return sum(c.isdigit() for c in value) > MAX_NUMBER_DIGITS


def _check_scalar(event: Any, source: str) -> None:
    if number_too_long(event.value, event.style):
        digits = sum(c.isdigit() for c in event.value)
        raise _refuse(
            source, event, f"a number of {digits} digits (the limit is {MAX_NUMBER_DIGITS})"
        )


def _refuse(source: str, event: Any, why: str) -> ConfigError:
    mark = getattr(event, "start_mark", None)
    line = f" at line {mark.line + 1}" if mark is not None else ""
    return ConfigError(
        f"{source}{line}: {why}: not read",
        hint="no suite file, workflow or allowlist needs this; check where the file came from",
    )

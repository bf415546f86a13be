"""Reading one mapping of a suite file, knowing where it is: typed accessors whose errors
name the file, the key path (`suites[1].tests[0].samples`) and what to write instead; an
unknown key or value gets a "did you mean"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from kl_bitexact.errors import ConfigError, did_you_mean

R = TypeVar("R", bound="Reader")
E = TypeVar("E", bound=Enum)


class Reader:
    """Reads one mapping, knowing where it is, so every error can say so."""

    def __init__(
        self, source: str, path: str, mapping: Mapping[str, Any], base_dir: Path | None
    ) -> None:
        self.source, self.path, self.mapping, self.base_dir = source, path, mapping, base_dir

    @classmethod
    def at(cls: type[R], source: str, path: str, value: Any, base_dir: Path | None) -> R:
        if not isinstance(value, Mapping):
            where = path or "(top level)"
            raise ConfigError(f"{source}: {where}: expected a mapping, got {kind(value)}")
        return cls(source, path, value, base_dir)

    def fail(self, key: str, problem: str, hint: str | None = None) -> ConfigError:
        where = f"{self.path}.{key}" if self.path else key
        return ConfigError(f"{self.source}: {where.lstrip('.')}: {problem}", hint=hint)

    def child(self: R, key: str, value: Any) -> R:
        return type(self).at(self.source, f"{self.path}.{key}".lstrip("."), value, self.base_dir)

    def allow(self, known: Sequence[str]) -> None:
        for key in self.mapping:
            if key in known:
                continue
            hint = did_you_mean(str(key), known) or f"known keys: {', '.join(known)}"
            raise self.fail(str(key), "unknown key", hint)

    def reject(self, keys: Sequence[str], context: str) -> None:
        for key in keys:
            if self.has(key):
                raise self.fail(
                    key, f"does not apply to {context}", "remove it (see docs/suites.md)"
                )

    def has(self, key: str) -> bool:
        return key in self.mapping

    # typed getters ------------------------------------------------------------------

    def text(self, key: str, default: str | None = None) -> str:
        value = self.mapping.get(key, default)
        if value is None:
            raise self.fail(key, "missing", f"add `{key}: ...`")
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a non-empty string, got {kind(value)}")
        return value

    def choice(self, key: str, names: type[E], default: E | None = None) -> E:
        """The member of `names` whose value the key holds (or `default`'s)."""
        value = self.text(key, None if default is None else default.value)
        options = [member.value for member in names]  # plain words, for the messages
        if value not in options:
            hint = did_you_mean(value, options) or f"one of: {', '.join(options)}"
            raise self.fail(key, f"{value!r} is not one of {', '.join(options)}", hint)
        return names(value)

    def integer(self, key: str, default: int, minimum: int = 1) -> int:
        value = self.mapping.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def number(
        self, key: str, default: float, low: float = 0.0, high: float | None = None
    ) -> float:
        value = self.mapping.get(key, default)
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
        if bad or value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f">= {low}"
            raise self.fail(key, f"expected a number {span}, got {value!r}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.mapping.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.mapping.get(key, [])
        if not isinstance(value, list) or not all(
            isinstance(item, (str, int, float)) for item in value
        ):
            raise self.fail(
                key, f"expected a list of strings, got {kind(value)}", 'quote numbers: "128"'
            )
        return tuple(str(item) for item in value)

    def integers(self, key: str, default: Sequence[int], minimum: int = 0) -> tuple[int, ...]:
        value = self.mapping.get(key, list(default))
        ok = isinstance(value, list) and value and all(is_int(item, minimum) for item in value)
        if not ok:
            raise self.fail(
                key, f"expected a non-empty list of integers >= {minimum}, got {value!r}"
            )
        return tuple(value)

    def length_range(self, key: str, default: int) -> tuple[int, int]:
        value = self.mapping.get(key, default)
        if is_int(value, 1):
            return (value, value)
        pair = isinstance(value, list) and len(value) == 2 and all(is_int(v, 1) for v in value)
        if pair and value[0] <= value[1]:
            return (value[0], value[1])
        raise self.fail(
            key, f"expected a length or [min, max], got {value!r}", "e.g. 1024 or [512, 1024]"
        )


def is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"

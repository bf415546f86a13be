"""results.json decoded and validated in C: strict msgspec twins of the model's dataclasses.

msgspec decodes JSON straight into typed objects, checking types, required keys, unknown
keys and bounds as it parses, about 50 times faster than pure-Python JSON Schema
validation (which took 95% of `report` on big files). Dataclasses cannot refuse unknown
keys, so every dataclass of `model.py` gets a frozen Struct twin that can; the twin is
then converted into the dataclass (also in C).

Nothing here lists fields: each twin is built from its dataclass's fields and types and
from the bounds of the published schema (`schemas/results.schema.json`), so a field added
to both is decoded without touching this module, and a field added to only one of them
fails the build of the twins (at the first load, hence in every test that loads results)
naming the field. `tests/results/test_strict_schema.py` proves that the schema and the
decoder accept and reject the same documents.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import json
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import msgspec

from kl_bitexact.results.model import Results

# JSON Schema keywords that bound a value, and the msgspec.Meta argument for each.
_BOUNDS = {"maxLength": "max_length", "minLength": "min_length", "minimum": "ge", "maximum": "le"}


class SchemaMismatch(Exception):
    """model.py and results.schema.json disagree (a bug in kl-bitexact, not bad input)."""


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of results.json (schemas/results.schema.json)."""
    text = resources.files("kl_bitexact").joinpath("schemas/results.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def decode(raw: bytes) -> Results:
    """results.json bytes as Results; raises msgspec.DecodeError / ValidationError."""
    with _no_gc():
        return _to_model(msgspec.json.decode(raw, type=_twin_of_results()))


def convert(document: Any) -> Results:
    """An already parsed document (dicts, lists) as Results, with the same checks."""
    with _no_gc():
        return _to_model(msgspec.convert(document, type=_twin_of_results()))


def _to_model(twin: Any) -> Results:
    results: Results = msgspec.convert(twin, type=Results, from_attributes=True)
    return results


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cycle collector while tens of thousands of acyclic objects are built:
    otherwise it walks the growing heap again and again (half the decode time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@cache
def _twin_of_results() -> Any:
    return _Twins(schema()).struct_for(Results, schema())


class _Twins:
    """Builds one strict Struct per dataclass, walking the dataclass and its schema node."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.built: dict[type, Any] = {}

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            name = str(node["$ref"]).removeprefix("#/$defs/")
            node = self.root["$defs"][name]
        return node

    def struct_for(self, cls: type, node: Mapping[str, Any]) -> Any:
        if cls not in self.built:
            self.built[cls] = self._build(cls, self.resolve(node))
        return self.built[cls]

    def _build(self, cls: type, node: Mapping[str, Any]) -> Any:
        properties: Mapping[str, Any] = node.get("properties", {})
        names = [field.name for field in dataclasses.fields(cls)]
        if set(names) != set(properties):
            raise SchemaMismatch(
                f"{cls.__name__}: fields only in model.py {sorted(set(names) - set(properties))}, "
                f"only in results.schema.json {sorted(set(properties) - set(names))}"
            )
        hints = get_type_hints(cls)
        required = set(node.get("required", ()))
        specs: list[tuple[Any, ...]] = []
        for field in dataclasses.fields(cls):
            kind = self.type_for(
                hints[field.name], properties[field.name], f"{cls.__name__}.{field.name}"
            )
            if field.name in required:
                specs.append((field.name, kind))
            else:
                specs.append((field.name, kind, self._default(field, kind)))
        # msgspec wants the fields without a default first; keyword decoding makes order moot.
        specs.sort(key=lambda spec: len(spec) == 3)
        return msgspec.defstruct(
            f"Strict{cls.__name__}", specs, frozen=True, forbid_unknown_fields=True, gc=False
        )

    def _default(self, field: dataclasses.Field[Any], kind: Any) -> Any:
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:
            factory: Callable[[], Any] = field.default_factory
            return msgspec.field(
                default_factory=lambda: msgspec.convert(factory(), kind, from_attributes=True)
            )
        raise SchemaMismatch(f"{field.name}: optional in the schema but has no default in model.py")

    def type_for(self, hint: Any, node: Mapping[str, Any], where: str) -> Any:
        node = self.resolve(node)
        origin = get_origin(hint)
        if origin in (Union, types.UnionType):
            inner = [arg for arg in get_args(hint) if arg is not type(None)]
            if len(inner) != 1:
                raise SchemaMismatch(f"{where}: only `X | None` unions are supported")
            return self.type_for(inner[0], node, where) | None
        if origin is tuple:
            return tuple[self.type_for(get_args(hint)[0], node["items"], where), ...]  # type: ignore[misc]
        if dataclasses.is_dataclass(hint):
            return self.struct_for(hint, node)  # type: ignore[arg-type]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self._enum(hint, node, where)
        if "const" in node:
            return Literal[node["const"]]
        bounds = {_BOUNDS[key]: value for key, value in node.items() if key in _BOUNDS}
        return Annotated[hint, msgspec.Meta(**bounds)] if bounds else hint

    @staticmethod
    def _enum(hint: type[enum.Enum], node: Mapping[str, Any], where: str) -> Any:
        values = [member.value for member in hint]
        if sorted(values) != sorted(node.get("enum", ())):
            raise SchemaMismatch(f"{where}: {hint.__name__} values differ from the schema's enum")
        return hint

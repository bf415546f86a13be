"""results.json decoded and validated in C, straight into the model where it can be.

msgspec decodes JSON into typed objects, checking types, required keys, unknown keys and
bounds as it parses, about 50 times faster than pure-Python JSON Schema validation (which
took 95% of `report` on big files). The model's values (model.py) are frozen Structs that
refuse unknown keys and carry the schema's bounds, so most of a document, every test
included, decodes into them directly. Where the schema asks more than the model's
constructor does (results.json must name its `tool`, `run` and `schema_version`, a suite its
`tests`), a strict twin of that class is decoded instead and converted after (a handful of
objects per file: the tests inside pass through as they are).

Nothing here lists fields: the twin of a class is worked out from its fields and types and
from the bounds of the published schema (`schemas/results.schema.json`); the class is its
own twin when it already says exactly that. A field added to only one of the two, or a
bound that differs, fails the first load naming the field, except that a bound the model
leaves out only costs a twin: `tests/results/test_strict_schema.py` holds that every class
but those is its own twin, and that the schema and the decoder accept and reject the same
documents.
"""

from __future__ import annotations

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
_ARRAY_BOUNDS = {"maxItems": "max_length"}


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
    """Works out the strict type of each model class, walking the class and its schema node:
    the class itself when it says all the schema says, else a twin built for it."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.built: dict[type, Any] = {}

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            name = str(node["$ref"]).removeprefix("#/$defs/")
            node = self.root["$defs"][name]
        return node

    def struct_for(self, cls: type[msgspec.Struct], node: Mapping[str, Any]) -> Any:
        if cls not in self.built:
            self.built[cls] = self._build(cls, self.resolve(node))
        return self.built[cls]

    def _build(self, cls: type[msgspec.Struct], node: Mapping[str, Any]) -> Any:
        properties: Mapping[str, Any] = node.get("properties", {})
        fields = msgspec.structs.fields(cls)
        names = {field.name for field in fields}
        if names != set(properties):
            raise SchemaMismatch(
                f"{cls.__name__}: fields only in model.py {sorted(names - set(properties))}, "
                f"only in results.schema.json {sorted(set(properties) - names)}"
            )
        plain, declared = get_type_hints(cls), get_type_hints(cls, include_extras=True)
        required = set(node.get("required", ()))
        specs: list[tuple[Any, ...]] = []
        own = cls.__struct_config__.forbid_unknown_fields
        for field in fields:
            where = f"{cls.__name__}.{field.name}"
            kind = self.type_for(plain[field.name], properties[field.name], where)
            _same_bounds(kind, declared[field.name], where)
            own = (
                own and kind == declared[field.name] and field.required == (field.name in required)
            )
            if field.name in required:
                specs.append((field.name, kind))
            else:
                specs.append((field.name, kind, self._default(field, kind)))
        if own:
            return cls
        # msgspec wants the fields without a default first; keyword decoding makes order moot.
        specs.sort(key=lambda spec: len(spec) == 3)
        return msgspec.defstruct(
            f"Strict{cls.__name__}", specs, frozen=True, forbid_unknown_fields=True, gc=False
        )

    @staticmethod
    def _default(field: msgspec.structs.FieldInfo, kind: Any) -> Any:
        if field.default is not msgspec.NODEFAULT:
            return field.default
        if field.default_factory is not msgspec.NODEFAULT:
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
            items = self.type_for(get_args(hint)[0], node["items"], where)
            return _bounded(tuple[items, ...], node, _ARRAY_BOUNDS)  # type: ignore[valid-type]
        if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
            return self.struct_for(hint, node)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self._enum(hint, node, where)
        if "const" in node:
            return Literal[node["const"]]
        return _bounded(hint, node, _BOUNDS)

    @staticmethod
    def _enum(hint: type[enum.Enum], node: Mapping[str, Any], where: str) -> Any:
        values = [member.value for member in hint]
        if sorted(values) != sorted(node.get("enum", ())):
            raise SchemaMismatch(f"{where}: {hint.__name__} values differ from the schema's enum")
        return hint


def _bounded(kind: Any, node: Mapping[str, Any], keywords: Mapping[str, str]) -> Any:
    bounds = {keywords[key]: value for key, value in node.items() if key in keywords}
    return Annotated[kind, msgspec.Meta(**bounds)] if bounds else kind


def _same_bounds(wanted: Any, declared: Any, where: str) -> None:
    """A bound model.py states must be the schema's: one it states and the schema does not
    (or states otherwise) would refuse documents the published schema accepts."""
    if _metas(declared) - _metas(wanted):
        raise SchemaMismatch(f"{where}: model.py bounds it otherwise than results.schema.json")


def _metas(kind: Any, at: tuple[int, ...] = ()) -> set[tuple[tuple[int, ...], str]]:
    """Every bound anywhere in a type, with where it sits in it (a twin's name aside)."""
    found: set[tuple[tuple[int, ...], str]] = set()
    if get_origin(kind) is Annotated:
        found |= {(at, repr(meta)) for meta in kind.__metadata__}
        kind = kind.__origin__
    for place, arg in enumerate(get_args(kind)):
        found |= _metas(arg, (*at, place))
    return found

"""The smallest JSON value a schema of GitHub's OpenAPI description accepts.

The fake builds each response from the schema's skeleton plus the fields it means, so a
field GitHub adds to `required` shows up in responses without anyone editing the fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "uri": "https://github.invalid/",
    "email": "octocat@github.invalid",
    "uuid": "00000000-0000-0000-0000-000000000000",
}


def skeleton(spec: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    """A minimal instance of `schema`: required properties only, nulls where allowed."""
    schema = _resolve(spec, schema)
    if schema.get("nullable"):
        return None
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(skeleton(spec, part))
        return merged
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return skeleton(spec, schema[key][0])
    return _typed(spec, schema)


def _typed(spec: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type", "object")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: skeleton(spec, properties[name]) for name in schema.get("required", ())}
    if kind == "array":
        return []
    if kind == "string":
        return _FORMATS.get(schema.get("format", ""), "")
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return None


def _resolve(spec: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        node: Any = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def component(spec: Mapping[str, Any], name: str) -> Any:
    """Skeleton of `#/components/schemas/NAME`."""
    return skeleton(spec, {"$ref": f"#/components/schemas/{name}"})


def merged(base: Any, overrides: Mapping[str, Any]) -> Any:
    """`base` with `overrides` applied recursively (nested dicts merge, other values replace)."""
    result = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result

"""Check one HTTP exchange against GitHub's OpenAPI description (openapi-core)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from openapi_core import OpenAPI
from openapi_core.configurations import Config
from openapi_core.datatypes import RequestParameters
from openapi_core.templating.responses.exceptions import ResponseNotFound
from openapi_schema_validator import OAS30Validator
from werkzeug.datastructures import Headers, ImmutableMultiDict

from kl_bitexact.testing.openapi_spec import load_spec

# The description's only server; the fake answers as if it were that host.
GITHUB_HOST = "https://api.github.com"
# GitHub answers these on any endpoint (a comment deleted by someone else is 404) with a
# `basic-error` body, though the description lists them only for some operations.
UNDOCUMENTED_ERRORS = frozenset({401, 403, 404, 422})


@dataclass
class Exchange:
    """One request as openapi-core's Request protocol wants it."""

    method_upper: str
    path: str
    query: str
    header_items: list[tuple[str, str]]
    body: bytes | None
    parameters: RequestParameters = field(init=False)

    def __post_init__(self) -> None:
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(parse_qsl(self.query, keep_blank_values=True)),
            header=Headers(self.header_items),
        )

    @property
    def host_url(self) -> str:
        return GITHUB_HOST

    @property
    def method(self) -> str:
        return self.method_upper.lower()

    @property
    def content_type(self) -> str:
        value = Headers(self.header_items).get("Content-Type")
        return (value or "application/octet-stream").lower()


@dataclass(frozen=True)
class Reply:
    """One response as openapi-core's Response protocol wants it."""

    status_code: int
    header_map: Mapping[str, str]
    data: bytes | None

    @property
    def headers(self) -> Headers:
        return Headers(list(self.header_map.items()))

    @property
    def content_type(self) -> str:
        return self.header_map.get("Content-Type", "application/json").split(";")[0]


class SpecChecker:
    """Validates requests and responses; returns problems as strings, never raises."""

    def __init__(self, spec: dict[str, Any] | None = None) -> None:
        # Skipping the validation of the 13 MB description itself takes loading from 36 s
        # to 0.3 s; openapi-core accepts None here although its annotation does not say so.
        config = Config(spec_validator_cls=None)  # type: ignore[arg-type]
        self._spec = spec if spec is not None else load_spec()
        self._api = OpenAPI.from_dict(self._spec, config=config)

    def request_problems(self, exchange: Exchange) -> list[str]:
        return [_describe(error) for error in self._api.iter_request_errors(exchange)]

    def response_problems(self, exchange: Exchange, reply: Reply) -> list[str]:
        errors = list(self._api.iter_response_errors(exchange, reply))
        if reply.status_code in UNDOCUMENTED_ERRORS and _only_unknown_status(errors):
            return self._basic_error_problems(reply)
        return [_describe(error) for error in errors]

    def _basic_error_problems(self, reply: Reply) -> list[str]:
        """An error status the operation does not list, checked as GitHub's `basic-error`."""
        schema = self._spec["components"]["schemas"]["basic-error"]
        try:
            body = json.loads(reply.data or b"")
        except ValueError:
            return [f"{reply.status_code} error body is not JSON"]
        validator = OAS30Validator(schema)
        return [f"{reply.status_code} error body: {e.message}" for e in validator.iter_errors(body)]


def _only_unknown_status(errors: list[Exception]) -> bool:
    return bool(errors) and all(isinstance(error, ResponseNotFound) for error in errors)


def _describe(error: Exception) -> str:
    cause = error.__cause__ or error
    schema_errors = getattr(cause, "schema_errors", None)
    if schema_errors:
        return f"{type(error).__name__}: " + "; ".join(_one_line(item) for item in schema_errors)
    return f"{type(error).__name__}: {cause}"


def _one_line(cause: Any) -> str:
    path = "/".join(str(part) for part in getattr(cause, "absolute_path", ()))
    message = getattr(cause, "message", str(cause))
    return f"{path}: {message}" if path else str(message)

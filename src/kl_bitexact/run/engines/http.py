"""A JSON-over-HTTP client for inference servers: one place that turns transport failures and
error answers into `EngineError` messages naming the URL, the status and what the server said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines import deadline

# A server's error body is echoed into the message; keep it readable.
ERROR_BODY_CHARS = 300


@dataclass(frozen=True)
class JsonClient:
    base_url: str
    timeout_s: float = 300.0
    session: requests.Session = field(default_factory=requests.Session, compare=False)

    def get(self, path: str) -> Any:
        return self._decode(self._send("GET", path, None), path)

    def post(self, path: str, body: Any = None) -> Any:
        return self._decode(self._send("POST", path, body), path)

    def get_if_served(self, path: str) -> Any | None:
        """GET `path` in one request; None when the server does not serve it (404)."""
        response = self._send("GET", path, None, check=False)
        if response.status_code == 404:
            return None
        if not response.ok:
            self._send("GET", path, None)  # raises, naming the status (a rare path)
        return self._decode(response, path)

    def status(self, method: str, path: str) -> int:
        """The HTTP status of a request, for probing which endpoints a server has."""
        return self._send(method, path, None, check=False).status_code

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def _send(self, method: str, path: str, body: Any, *, check: bool = True) -> requests.Response:
        try:
            response = deadline.request(
                self.session,
                method,
                self.url(path),
                json=body,
                timeout=self.timeout_s,
                total_s=self.timeout_s,
            )
        except requests.RequestException as error:
            raise EngineError(
                f"{method} {self.url(path)} failed: {error}",
                hint="check that the server is running and the URL is right",
            ) from error
        if check and not response.ok:
            raise EngineError(
                f"{method} {self.url(path)} answered {response.status_code}: "
                f"{response.text[:ERROR_BODY_CHARS]}"
            )
        return response

    def _decode(self, response: requests.Response, path: str) -> Any:
        if not response.content:
            return None
        try:
            return response.json()
        except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
            raise EngineError(
                f"{self.url(path)} did not answer JSON: {response.text[:ERROR_BODY_CHARS]}"
            ) from error

"""One HTTP request of a requests session bounded as a whole: its total time and the size of
its answer (the OpenAI-compatible adapters'; sglang's runs on `transport.py`, the same bound
over `http.client`).

requests' `timeout` bounds each read, not the request: a server that trickles one byte a
second keeps a request with `timeout=5` alive for as long as it likes. Here the request
runs in a daemon thread that the caller waits for at most `total_s`; past that the caller
gets `requests.Timeout` (what the adapters already turn into "did not answer within N s")
and goes on. The abandoned thread ends at its next failed read, or when the server is
stopped at the end of its suite; being a daemon, it never holds the process's exit.
"""

from __future__ import annotations

import threading
from typing import Any

import requests

# A batch of 64 prompts of 128k tokens with their logprobs is a few hundred megabytes.
MAX_ANSWER_BYTES = 1024 * 1024 * 1024
_CHUNK = 1024 * 1024


def request(
    session: requests.Session,
    method: str,
    url: str,
    *,
    json: Any,
    timeout: float | tuple[float, float],
    total_s: float,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> requests.Response:
    """`session.request(...)` with its body read, finished within `total_s` or Timeout."""
    outcome: list[requests.Response | BaseException] = []

    def work() -> None:
        try:
            outcome.append(_fetch(session, method, url, json, timeout, max_bytes))
        except BaseException as error:  # handed to the waiting thread, raised there
            outcome.append(error)

    worker = threading.Thread(target=work, name=f"http {method} {url}", daemon=True)
    worker.start()
    worker.join(total_s)
    if not outcome:
        raise requests.Timeout(f"no complete answer within {total_s:g} s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _fetch(
    session: requests.Session,
    method: str,
    url: str,
    json: Any,
    timeout: float | tuple[float, float],
    max_bytes: int,
) -> requests.Response:
    response = session.request(method, url, json=json, timeout=timeout, stream=True)
    with response:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_content(_CHUNK):
            size += len(chunk)
            if size > max_bytes:
                raise requests.exceptions.ContentDecodingError(
                    f"the answer is over {max_bytes} bytes; refused"
                )
            chunks.append(chunk)
        # What `response.content` returns from now on (requests' own cache of the body).
        response._content = b"".join(chunks)
    return response

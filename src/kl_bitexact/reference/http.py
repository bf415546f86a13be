"""The HTTP shell: sglang's native endpoints over a threading stdlib server."""

from __future__ import annotations

import json
import select
import socket
import sys
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kl_bitexact.reference.abandon import Abandoned
from kl_bitexact.reference.engine import ReferenceEngine
from kl_bitexact.reference.protocol import (
    RequestError,
    parse_generate,
    responses,
    stream_chunks,
)

MAX_BODY_BYTES = 64 * 1024 * 1024
HEALTH_PROBE = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}


class ReferenceServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: ReferenceEngine) -> None:
        super().__init__(address, Handler)
        self.engine = engine

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class Handler(BaseHTTPRequestHandler):
    server: ReferenceServer
    protocol_version = "HTTP/1.1"
    # An answer leaves in two writes (headers, then body). With Nagle's algorithm on, the
    # body waits for the client to acknowledge the headers, which a keep-alive client
    # delays by up to 40 ms (delayed ACK): 40 ms added to every request after a
    # connection's first. sglang's server (uvicorn on asyncio) sets TCP_NODELAY; so do we.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        routes = {
            ("GET", "/health"): self._health,
            ("GET", "/health_generate"): self._health_generate,
            # sglang renamed /get_server_info to /server_info (0.5.x helpers ask the new one);
            # both are served, like sglang's transition releases did.
            ("GET", "/get_server_info"): self._server_info,
            ("GET", "/server_info"): self._server_info,
            ("GET", "/get_model_info"): self._model_info,
            ("GET", "/flush_cache"): self._flush,
            ("POST", "/flush_cache"): self._flush,
            ("POST", "/generate"): self._generate,
        }
        handler = routes.get((method, path))
        if handler is None:
            known = any(route_path == path for _, route_path in routes)
            status = HTTPStatus.METHOD_NOT_ALLOWED if known else HTTPStatus.NOT_FOUND
            self._error(status, f"{method} {path} is not served here")
            return
        try:
            handler()
        except RequestError as error:
            self._error(HTTPStatus.BAD_REQUEST, str(error))
        except Exception as error:  # keep serving; the client sees what went wrong
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}")
            raise

    def _health(self) -> None:
        self._send(HTTPStatus.OK, b"", "text/plain")

    def _health_generate(self) -> None:
        requests, _ = parse_generate(HEALTH_PROBE, self.server.engine.limits)
        self.server.engine.generate(requests)
        self._send(HTTPStatus.OK, b"", "text/plain")

    def _server_info(self) -> None:
        self._json(HTTPStatus.OK, self.server.engine.server_info())

    def _model_info(self) -> None:
        info = self.server.engine.server_info()
        self._json(HTTPStatus.OK, {"model_path": info["model_path"], "is_generation": True})

    def _flush(self) -> None:
        self._read_body()
        self.server.engine.flush()
        self._send(HTTPStatus.OK, b"Cache flushed.\n", "text/plain")

    def _generate(self) -> None:
        body = self._read_body()
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RequestError(f"the request body is not valid JSON: {error}") from None
        engine = self.server.engine
        requests, batched = parse_generate(payload, engine.limits)
        try:
            # As sglang aborts a request whose client disconnected, between prefill chunks.
            results = engine.generate(requests, gone=None if batched else self._client_gone)
        except Abandoned as dropped:
            self.log_message("%s", f"POST /generate: {dropped}")
            self.close_connection = True  # nobody to answer
            return
        if payload.get("stream"):
            self._stream(stream_chunks(requests, results, batched))
        else:
            self._json(HTTPStatus.OK, responses(requests, results, batched))

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        """Server-sent events, as sglang streams /generate: `data: {json}` per chunk, then
        `data: [DONE]`, in HTTP/1.1 chunked encoding (the connection stays reusable)."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = (b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks)
        for event in (*events, b"data: [DONE]\n\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")

    def _client_gone(self) -> bool:
        """Whether the client has closed its side of the connection: its socket reads as
        ended (a peek, so a pipelined next request is left where it is)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:  # reset by the peer: gone too
            return True

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            raise RequestError(f"Content-Length must be a size up to {MAX_BODY_BYTES} bytes")
        return self.rfile.read(int(length))

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._json(status, {"error": {"message": message, "code": int(status)}})

    def _json(self, status: HTTPStatus, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"kl-bitexact reference: {self.address_string()} {format % args}\n")


def serve(engine: ReferenceEngine, host: str, port: int) -> None:
    """Bind, announce the address on stdout (launchers read it), serve until stopped."""
    with ReferenceServer((host, port), engine) as server:
        print(f"kl-bitexact reference server listening on {server.url}", flush=True)
        server.serve_forever()

"""A server laid out like sglang's: HTTP in this process, the engine in a child process
started by multiprocessing's `spawn` (sglang starts its scheduler and detokenizer that
way), the two talking over a pipe. The engine is the embedded reference engine, so the
bundled checks pass against it; the reach tests use it to prove that probes follow the
spawned child (tests/reach/test_spawned_server.py).

Run: python tests/helpers/spawned_engine_server.py --port P [serve-reference's flags]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from kl_bitexact.commands.serve_reference import add_arguments, config_from
from kl_bitexact.reference.http import serve


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return parser.parse_args(argv)


def compute(connection: Connection, argv: list[str]) -> None:
    """The spawned child: a reference engine answering the HTTP process's calls."""
    from kl_bitexact.reference.engine import ReferenceEngine

    engine = ReferenceEngine(config_from(_arguments(argv)))
    while True:
        try:
            method, arguments = connection.recv()
        except EOFError:
            return  # the HTTP process is gone
        try:
            value = getattr(engine, method)
            connection.send((True, value(*arguments) if callable(value) else value))
        except Exception as error:
            connection.send((False, f"{type(error).__name__}: {error}"))


class SpawnedEngine:
    """The engine as the HTTP handler sees it: each call a round trip to the child."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self.limits = self._call("limits")

    def _call(self, method: str, *arguments: Any) -> Any:
        with self._lock:
            self._connection.send((method, arguments))
            ok, value = self._connection.recv()
        if not ok:
            raise RuntimeError(f"engine process: {value}")
        return value

    def generate(self, requests: Any, gone: Any = None) -> Any:
        # `gone` asks the HTTP process's socket whether the client hung up: it cannot cross
        # to the child, so this server never drops an abandoned prefill (not what it is for).
        del gone
        return self._call("generate", requests)

    def server_info(self) -> Any:
        return self._call("server_info")

    def flush(self) -> None:
        self._call("flush")


def main(argv: list[str]) -> None:
    args = _arguments(argv)
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=compute, args=(theirs, argv), name="engine", daemon=True
    )
    child.start()
    print(f"engine process {child.pid} started (spawn)", flush=True)
    serve(SpawnedEngine(ours), args.host, args.port)  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1:])

"""A stdlib HTTP server speaking sglang's native protocol over FakeEngine, for tests of
the adapter and of the server lifecycle (crash, hang, never healthy, out of memory).

Run: python tests/helpers/fake_sglang_server.py --port P [--crash-after N] [--hang-after N]
     [--never-healthy] [--oom] [--page-size N] [--bad-logprob-after N] [--malformed FIELD]
     [--trickle] [--drip PATH]... [--deterministic] [--no-cached-tokens]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_engine import FakeEngine

from kl_bitexact.run.engines.base import SamplingParams


def serve(args: argparse.Namespace) -> None:
    engine = FakeEngine(page_size=args.page_size)
    generates = {"count": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *items: object) -> None:
            print(format % items, flush=True)

        def _send(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            if self.path in args.drip:
                self._drip(status, data)
                return
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(503 if args.never_healthy else 200, {})
            elif self.path in ("/server_info", "/get_server_info"):
                info = engine.server_info()
                if args.deterministic:  # its logprobs are a function of the prefix alone
                    info["enable_deterministic_inference"] = True
                self._send(200, info)
            else:
                self._send(404, {"error": self.path})

        def do_POST(self) -> None:
            body = json.loads(
                self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null"
            )
            if self.path == "/flush_cache":
                engine.flush()
                self._send(200, {})
                return
            generates["count"] += 1
            if args.crash_after is not None and generates["count"] > args.crash_after:
                if args.oom:
                    print(
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                        flush=True,
                    )
                os._exit(1)
            if args.hang_after is not None and generates["count"] > args.hang_after:
                time.sleep(3600)
            answered = answer(engine, body)
            if args.bad_logprob_after is not None and generates["count"] > args.bad_logprob_after:
                for item in answered:  # a logprob that is not a number (a broken server)
                    meta = item["meta_info"]
                    key = "output_token_logprobs" if item["output_ids"] else "input_token_logprobs"
                    meta[key] = [["not-a-number", *entry[1:]] for entry in meta[key]]
            reply = answered
            if args.no_cached_tokens:  # as a server that does not count its hits
                for item in reply:
                    del item["meta_info"]["cached_tokens"]
            if args.no_output_logprobs:  # as a server that leaves its decode unscored
                for item in reply:
                    meta = item["meta_info"]
                    meta["output_token_logprobs"] = [
                        [None, *entry[1:]] for entry in meta["output_token_logprobs"]
                    ]
            if args.malformed:
                spoil(reply, args.malformed)
            if args.trickle:
                self._trickle(reply)
                return
            self._send(200, reply)

        def _trickle(self, body: object) -> None:
            """The answer one byte a second: every read is quick, the whole is not."""
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(1)

        def _drip(self, status: int, data: bytes) -> None:
            """The whole answer, status line and headers too, 1 byte / 0.25 s: every read
            is quick, the answer never is."""
            head = (
                f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            for byte in head + data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.25)

    load_weights(args.slow_start)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True  # a hanging request must not hold the exit
    print(f"fake sglang pid {os.getpid()} listening on {args.port}", flush=True)
    # Like a real server: SIGINT and SIGTERM end it with one line, not a traceback.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print(f"fake sglang pid {os.getpid()} shutting down", flush=True)


def load_weights(seconds: float) -> None:
    """A slow start that logs as real servers do: a coloured progress bar redrawn with
    carriage returns, never ending its line while it runs."""
    steps = int(seconds * 10)
    for step in range(steps):
        print(f"\r\x1b[32mfake sglang loading weights {100 * step // steps}%\x1b[0m", end="")
        sys.stdout.flush()
        time.sleep(0.1)
    if steps:
        print()


def spoil(reply: list[dict[str, Any]], field: str) -> None:
    """A non-numeric value where the protocol has a number."""
    for item in reply:
        meta = item["meta_info"]
        if field == "logprob":
            for key in ("output_token_logprobs", "input_token_logprobs"):
                if meta.get(key):
                    meta[key][-1][0] = "not-a-number"
        elif field == "output_id" and item["output_ids"]:
            item["output_ids"][0] = "seven"
        elif field == "cached_tokens":
            meta["cached_tokens"] = {"n": 3}


def answer(engine: FakeEngine, body: dict[str, Any]) -> list[dict[str, Any]]:
    sampling = body["sampling_params"]
    prompts = body["input_ids"]
    starts = body.get("logprob_start_len")
    if sampling["max_new_tokens"] == 0 and starts not in (None, -1):
        # A replay, scored from each prompt's logprob_start_len on (one for all, or one each).
        starts = [starts] * len(prompts) if isinstance(starts, int) else starts
        replays = engine.replay(prompts)
        return [
            {
                "output_ids": [],
                "meta_info": {
                    "input_token_logprobs": [
                        [lp, t, None] for lp, t in zip(r.input_logprobs, p, strict=True)
                    ][start:],
                    "output_token_logprobs": [],
                    "cached_tokens": 0,
                    "prompt_tokens": len(p),
                },
            }
            for r, p, start in zip(replays, prompts, starts, strict=True)
        ]
    params = SamplingParams(max_new_tokens=sampling["max_new_tokens"])
    return [
        {
            "output_ids": list(g.output_ids),
            "meta_info": {
                "output_token_logprobs": [
                    [lp, t, None] for lp, t in zip(g.output_logprobs, g.output_ids, strict=True)
                ],
                "cached_tokens": g.cached_tokens,
                "prompt_tokens": g.prompt_tokens,
                "finish_reason": {"type": "length", "length": len(g.output_ids)},
            },
        }
        for g in engine.generate(prompts, params)
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--page-size", type=int, default=4)
    parser.add_argument("--crash-after", type=int)
    parser.add_argument("--hang-after", type=int)
    parser.add_argument("--bad-logprob-after", type=int)
    parser.add_argument("--never-healthy", action="store_true")
    parser.add_argument("--oom", action="store_true")
    parser.add_argument("--malformed", choices=("logprob", "output_id", "cached_tokens"))
    parser.add_argument("--trickle", action="store_true", help="answer /generate at 1 byte/s")
    parser.add_argument(
        "--drip", action="append", default=[], metavar="PATH", help="answer PATH at 4 bytes/s"
    )
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--no-cached-tokens", action="store_true")
    parser.add_argument("--no-output-logprobs", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0, help="seconds before listening")
    serve(parser.parse_args())

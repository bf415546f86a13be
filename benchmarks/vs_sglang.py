"""Benchmark: sglang's own KL helpers vs `kl-bitexact run`, same checks, same server.

    python benchmarks/vs_sglang.py [--sizes 8x32,32x32,32x256] [--repeat R]

One reference server (`serve-reference --enable-deterministic-inference`) sits behind a
counting proxy. For each size (prompts x new tokens), as whole processes:

- sglang: a Python process running sglang 0.5.23's `kl_test_utils` helpers (from its wheel,
  tests/helpers/sglang_wheel.py) for match, prefill cache hit and decode cache hit, as a
  model test calls them;
- kl-bitexact: `kl-bitexact run SUITE` with the same three checks, prompts (sglang's
  LongBench cache file), greedy sampling, threshold 1e-9 and sglang's 0.5 hit ratio.

The two sides run interleaved (sglang, kl-bitexact, sglang, ...: a busy spell on a shared
machine hits both alike). Printed per size and tool: median wall, median CPU of the client
process alone (wait4's rusage of that child), HTTP requests the server received, and tokens
the server computed (prompt tokens not served from its cache plus generated tokens, summed
from its answers' meta_info), then the ratio kl-bitexact / sglang, and the load average.
Targets (issue 40): kl-bitexact's client CPU <= sglang's at every size, and no more tokens
computed. Wall is printed, not judged: on a loaded machine it is the server's and the load's.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from processes import KL, compile_bytecode, machine
from processes import measure as measure_process

import kl_bitexact

HELPERS = Path(__file__).resolve().parents[1] / "tests" / "helpers"
MODEL = "kl-bitexact-reference"
THRESHOLD = 1e-9
LISTENING = "kl-bitexact reference server listening on "
SERVER_ARGS = ("--enable-deterministic-inference",)
VERBOSE = "--requests" in sys.argv  # print each request and its computed tokens
COMMA = 1 + ord(",") % 319  # the shim tokenizer's ","
SGLANG_HELPERS = (
    "test_input_output_logprobs_match_helper",
    "test_input_output_logprobs_match_prefill_cache_hit_helper",
    "test_input_output_logprobs_match_decode_cache_hit_helper",
)


# --- the server's view: a counting proxy ----------------------------------------------------


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.tokens = 0
        self.log: list[str] = []

    def add(self, request: str, tokens: int) -> None:
        with self.lock:
            self.requests += 1
            self.tokens += tokens
            self.log.append(f"{request} {tokens})")

    def take(self) -> tuple[int, int]:
        with self.lock:
            taken = self.requests, self.tokens
            self.requests = self.tokens = 0
            if VERBOSE:
                print("    " + "\n    ".join(self.log))
            self.log = []
            return taken


def computed_tokens(body: bytes) -> int:
    """Prompt tokens not served from the cache plus generated tokens, over every prompt."""
    try:
        answer = json.loads(body)
    except ValueError:
        return 0
    answers = answer if isinstance(answer, list) else [answer]
    total = 0
    for item in answers:
        meta = item.get("meta_info", {}) if isinstance(item, dict) else {}
        prompt, cached = meta.get("prompt_tokens", 0), meta.get("cached_tokens", 0)
        total += prompt - cached + meta.get("completion_tokens", 0)
    return total


def proxy(upstream: str, counts: Counts) -> ThreadingHTTPServer:
    host, port = upstream.removeprefix("http://").split(":")
    local = threading.local()

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as kl-bitexact's session uses it
        # Answers leave at once, as from sglang's server (uvicorn on asyncio sets
        # TCP_NODELAY): under Nagle's algorithm a keep-alive client's delayed ACK held each
        # answer's body up to 40 ms, a cost sglang's helpers (a new connection per request)
        # never paid.
        disable_nagle_algorithm = True

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if not hasattr(local, "conn"):
                local.conn = http.client.HTTPConnection(host, int(port), timeout=600)
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            started = time.perf_counter()
            local.conn.request(self.command, self.path, body=body, headers=headers)
            answer = local.conn.getresponse()
            data = answer.read()
            generated = self.path.startswith("/generate") and answer.status == 200
            took = time.perf_counter() - started
            request = f"{self.command} {self.path} ({took:.2f} s, tokens:"
            counts.add(request, computed_tokens(data) if generated else 0)
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.getheader("Content-Type") or "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.contextmanager
def reference_server() -> Iterator[str]:
    command = [sys.executable, "-m", "kl_bitexact", "serve-reference", "--port", "0"]
    process = subprocess.Popen(
        [*command, *SERVER_ARGS], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(LISTENING):
            raise SystemExit(f"serve-reference did not start: {line!r}")
        yield line[len(LISTENING) :].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


# --- the two flows ----------------------------------------------------------------------


def write_prompts(directory: Path) -> Path:
    """sglang's LongBench cache file (48 prompts of ids 1..319, 40..160 long): both tools
    read it, sglang by its cache name, kl-bitexact as the suite's `prompts` file."""
    rng = np.random.default_rng(15)
    prompts = [rng.integers(1, 320, int(rng.integers(40, 161))).tolist() for _ in range(48)]
    path = directory / f"input_ids_{MODEL}_3000_48.json"
    path.write_text(json.dumps(prompts))
    return path


SGLANG_SCRIPT = """
import sys
from sglang_wheel import load_sglang_module
kl = load_sglang_module("kl_test_utils")
kl.CACHE_DIR = {cache_dir!r}
acc = {{{model!r}: {{"kl_div": {threshold!r}}}}}
failed = 0
for name in {helpers!r}:
    try:
        getattr(kl, name)({url!r}, acc, {model!r}, max_samples={samples}, max_new_tokens={tokens})
    except AssertionError:
        failed += 1
sys.exit(failed)
"""


def sglang_argv(url: str, prompts: Path, samples: int, tokens: int) -> list[str]:
    script = SGLANG_SCRIPT.format(
        cache_dir=str(prompts.parent),
        model=MODEL,
        threshold=THRESHOLD,
        helpers=SGLANG_HELPERS,
        url=url,
        samples=samples,
        tokens=tokens,
    )
    return [sys.executable, "-c", script]


def suite_file(directory: Path, url: str, prompts: Path, samples: int, tokens: int) -> Path:
    """decode_cache_hit first: match reuses its turn 1, prefill_cache_hit match's replay."""
    common = {
        "samples": samples,
        "prompts": prompts.name,
        "max_new_tokens": tokens,
        "kl_threshold": THRESHOLD,
        "min_cache_hit_ratio": 0.5,
        "temperature": 0.0,
        "vocab_size": 320,
        "separator_ids": [COMMA],
    }
    checks = ("decode_cache_hit", "match", "prefill_cache_hit")
    suite = [
        {
            "name": "vs-sglang",
            "server": {"engine": "sglang", "base_url": url},
            "tests": [{"name": check, "check": check, **common} for check in checks],
        }
    ]
    path = directory / f"suite-{samples}x{tokens}.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


@dataclass(frozen=True)
class Side:
    wall: float
    cpu: float
    requests: int
    tokens: int
    exit_code: int


def measure(
    sides: dict[str, list[str]], counts: Counts, repeat: int, env: dict[str, str]
) -> dict[str, Side]:
    """Each side `repeat` times, interleaved; medians of each side's runs."""
    runs: dict[str, list[tuple[float, float, int, int, int]]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, argv in sides.items():
            counts.take()
            started = time.perf_counter()
            done = measure_process(argv, env)
            wall = time.perf_counter() - started
            requests, tokens = counts.take()
            runs[name].append((wall, done.cpu, requests, tokens, done.exit_code))
    return {
        name: Side(
            wall=statistics.median(run[0] for run in found),
            cpu=statistics.median(run[1] for run in found),
            requests=found[-1][2],
            tokens=found[-1][3],
            exit_code=found[-1][4],
        )
        for name, found in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x32,32x32,32x256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", action="store_true", help="list every request")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in size.split("x")) for size in args.sizes.split(",")]
    # Both sides as installed: kl-bitexact's modules, sglang's helpers and our shims compiled.
    sys.path.insert(0, str(HELPERS))
    from sglang_wheel import source_root

    compile_bytecode(Path(kl_bitexact.__file__).parent, source_root(), HELPERS)
    print(machine())
    print(
        f"match + prefill cache hit + decode cache hit, median of {args.repeat} interleaved "
        "runs (seconds; cpu: the client process's own)\n"
    )
    print(
        f"{'size':>8} {'tool':<12} {'wall':>7} {'cpu':>7} {'requests':>9} {'tokens':>8} {'exit':>5}"
    )
    met = True
    # sglang's side imports sglang_wheel from tests/helpers; both keep the caller's PYTHONPATH.
    env = {"PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")])}
    counts = Counts()
    with tempfile.TemporaryDirectory(prefix="kl-vs-sglang-") as scratch, reference_server() as up:
        directory = Path(scratch)
        prompts = write_prompts(directory)
        front = proxy(up, counts)
        url = f"http://127.0.0.1:{front.server_address[1]}"
        for samples, tokens in sizes:
            suite = suite_file(directory, url, prompts, samples, tokens)
            out = directory / f"out-{samples}x{tokens}"
            sides = {
                "sglang": sglang_argv(url, prompts, samples, tokens),
                "kl-bitexact": [*KL, "run", str(suite), "--out", str(out)],
            }
            measured = measure(sides, counts, args.repeat, env)
            theirs, ours = measured["sglang"], measured["kl-bitexact"]
            label = f"{samples}x{tokens}"
            for tool, side in (("sglang", theirs), ("kl-bitexact", ours)):
                print(
                    f"{label:>8} {tool:<12} {side.wall:>7.2f} {side.cpu:>7.2f}"
                    f" {side.requests:>9} {side.tokens:>8} {side.exit_code:>5}"
                )
            ratio = ours.cpu / theirs.cpu
            print(
                f"{label:>8} {'ratio':<12} {ours.wall / theirs.wall:>7.2f} {ratio:>7.2f}"
                f" {ours.requests / max(theirs.requests, 1):>9.2f}"
                f" {ours.tokens / max(theirs.tokens, 1):>8.2f}"
                f"   (load {os.getloadavg()[0]:.1f})\n"
            )
            ran = theirs.exit_code == 0 and ours.exit_code == 0
            met = met and ran and ratio <= 1.0 and ours.tokens <= theirs.tokens
        front.shutdown()
    print(machine())
    print(
        "targets (kl-bitexact client CPU <= sglang's, tokens computed <= sglang's, every size): "
        + ("met" if met else "NOT met")
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())

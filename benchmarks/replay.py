"""Time of a llama.cpp replay: every position (before `last`) vs only the compared tail.

Run: python benchmarks/replay.py [--lengths 40 200 1000 3000] [--last 24]
                                 [--vocabulary ascii|sentencepiece|byte_level]
Starts the real llama-server (scripts/build-llama-server.sh; one thread, as the integration
tests run it) on the tiny random-weight Llama of tests/helpers/tiny_llama_gguf.py and replays one
sequence of each length twice: `replay([seq])`, which scores every position as every replay
did before `last` existed, and `replay([seq], last=N)`, which the checks now ask for.
Prints a Markdown table (docs/engines.md quotes it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# The integration tests' launcher and model writer, reused rather than copied.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "helpers"))

from llama_server import STARTUP_TIMEOUT_S, llama_server_command
from tiny_llama_gguf import VOCABULARIES, TinyLlamaShape, write_tiny_llama

from kl_bitexact.run import server
from kl_bitexact.run.engines.openai import OpenAIEngine, connect
from kl_bitexact.suite.model import DialectName, EngineName, ServerSpec

# Four slots share the context; each needs room for the longest sequence.
CONTEXT_PER_SLOT = 4096


def launch(model: Path, workdir: Path) -> server.Server:
    command = llama_server_command(model, workdir)
    command[command.index("-c") + 1] = str(4 * CONTEXT_PER_SLOT)
    spec = ServerSpec(
        engine=EngineName.OPENAI,
        dialect=DialectName.LLAMACPP,
        command=tuple(command),
        startup_timeout=STARTUP_TIMEOUT_S,
    )
    return server.launch(spec, workdir / "llama-server.log", label="llama-server")


def timed(engine: OpenAIEngine, sequence: tuple[int, ...], last: int | None) -> float:
    engine.flush()
    start = time.perf_counter()
    engine.replay([sequence], last=last)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[40, 200, 1000, 3000])
    parser.add_argument("--last", type=int, default=24, help="decoded tokens compared")
    parser.add_argument("--vocabulary", choices=sorted(VOCABULARIES), default="ascii")
    args = parser.parse_args()
    vocab = len(VOCABULARIES[args.vocabulary]())
    rng = np.random.default_rng(0)
    workdir = Path(tempfile.mkdtemp(prefix="kl-bench-replay-"))
    # The tests' model, trained context raised so llama-server does not cap the slots.
    shape = TinyLlamaShape(context=CONTEXT_PER_SLOT)
    model = write_tiny_llama(workdir / "tiny-llama.gguf", shape=shape, vocabulary=args.vocabulary)
    print(
        f"llama-server, tiny Llama (2 layers, 64 wide, {args.vocabulary} vocabulary of {vocab}, "
        f"1 thread); tail = last {args.last}"
    )
    print("| sequence tokens | requests, all positions | s | requests, tail | s | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    running = launch(model, workdir)
    try:
        engine = connect(running.base_url)
        for length in args.lengths:
            sequence = tuple(int(t) for t in rng.integers(1, vocab, length))
            every = timed(engine, sequence, None)
            tail = timed(engine, sequence, args.last)
            print(
                f"| {length} | {length - 1} | {every:.2f} | {min(args.last, length - 1)} "
                f"| {tail:.2f} | {every / tail:.0f}x |",
                flush=True,
            )
    finally:
        running.stop()


if __name__ == "__main__":
    main()

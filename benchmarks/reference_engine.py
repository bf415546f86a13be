"""Speed of the embedded reference engine: prefill and decode tokens/s, cache hit vs miss.

Run: python benchmarks/reference_engine.py [--prompts 32] [--prompt-tokens 500] [--new 32]
Prints one table row per arithmetic mode (deterministic = exact, plain = float32 BLAS).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from kl_bitexact.reference.config import EngineConfig
from kl_bitexact.reference.engine import ReferenceEngine
from kl_bitexact.reference.protocol import parse_generate


def timed(engine: ReferenceEngine, prompts: list[list[int]], new: int) -> float:
    body = {
        "input_ids": prompts,
        "sampling_params": {"max_new_tokens": new, "ignore_eos": True, "sampling_seed": 1},
        "return_logprob": True,
    }
    requests, _ = parse_generate(body, engine.limits)
    start = time.perf_counter()
    engine.generate(requests)
    return time.perf_counter() - start


def measure(deterministic: bool, prompts: list[list[int]], new: int) -> dict[str, float]:
    engine = ReferenceEngine(EngineConfig(enable_deterministic_inference=deterministic))
    tokens = sum(len(p) for p in prompts)
    prefill = timed(engine, prompts, 0)  # cold: every token computed
    hit = timed(engine, prompts, 0)  # warm: only the tail after the last checkpoint
    engine.flush()
    with_decode = timed(engine, prompts, new)
    decode = with_decode - prefill
    return {
        "prefill tok/s": tokens / prefill,
        "decode tok/s": len(prompts) * new / decode,
        "miss ms/prompt": 1000 * prefill / len(prompts),
        "hit ms/prompt": 1000 * hit / len(prompts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--new", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 320, args.prompt_tokens).tolist() for _ in range(args.prompts)]
    print(f"{args.prompts} prompts x {args.prompt_tokens} tokens, {args.new} new tokens each")
    columns = ["prefill tok/s", "decode tok/s", "miss ms/prompt", "hit ms/prompt"]
    print(f"| mode | {' | '.join(columns)} |")
    print("|---" * (len(columns) + 1) + "|")
    for deterministic in (True, False):
        row = measure(deterministic, prompts, args.new)
        mode = "deterministic" if deterministic else "plain"
        print(
            f"| {mode} | "
            + " | ".join(f"{row[c]:.1f}" if "ms" in c else f"{row[c]:.0f}" for c in columns)
            + " |"
        )


if __name__ == "__main__":
    main()

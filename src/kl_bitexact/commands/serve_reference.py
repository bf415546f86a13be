"""`kl-bitexact serve-reference`: the embedded reference engine as an HTTP server."""

from __future__ import annotations

import argparse
import sys

from kl_bitexact.commands import Command
from kl_bitexact.errors import ConfigError, ServerError
from kl_bitexact.reference.config import (
    ATTENTION_BACKENDS,
    HICACHE_WRITE_POLICIES,
    PREFILL_GRAPH_BACKENDS,
    SPECULATIVE_ALGORITHMS,
    EngineConfig,
    resolve,
)
from kl_bitexact.reference.faults import Fault, help_text, parse_fault

DEFAULTS = EngineConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = help_text()
    parser.add_argument("--port", type=int, required=True, help="TCP port; 0 picks a free one")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    _cache_arguments(parser)
    _decoding_arguments(parser)
    parser.add_argument(
        "--fault",
        type=_fault,
        action="append",
        default=[],
        metavar="NAME",
        help="inject a state-layer bug into the cached path (repeatable; listed below)",
    )


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    sizes = {
        "--page-size": ("page_size", "tokens per cache page"),
        "--mamba-track-interval": (
            "mamba_track_interval",
            "decode tokens between recurrent-state checkpoints",
        ),
        "--chunked-prefill-size": (
            "chunked_prefill_size",
            "prefill chunk; the recurrent state is checkpointed at each chunk boundary",
        ),
        "--sliding-window": ("sliding_window_size", "window of the sliding-window layer"),
        "--context-length": ("context_length", "longest prompt + new tokens accepted"),
        "--max-total-tokens": ("max_total_tokens", "device cache budget, in tokens"),
        "--vocab-size": (
            "vocab_size",
            "token ids served, 0..N-1 (above 320, ids share the head's 320 classes)",
        ),
    }
    for flag, (field, text) in sizes.items():
        default = getattr(DEFAULTS, field)
        parser.add_argument(flag, type=int, default=default, help=f"{text} (default: {default})")
    parser.add_argument("--disable-radix-cache", action="store_true", help="never reuse a prefix")
    parser.add_argument(
        "--enable-hierarchical-cache",
        action="store_true",
        help="evicted pages move to a host tier and are reloaded on a hit",
    )
    parser.add_argument(
        "--hicache-write-policy",
        choices=HICACHE_WRITE_POLICIES,
        default=DEFAULTS.hicache_write_policy,
        help="when pages are copied to the host tier (default: %(default)s)",
    )
    parser.add_argument(
        "--hicache-ratio",
        type=float,
        default=DEFAULTS.hicache_ratio,
        help="host tier size as a multiple of --max-total-tokens (default: %(default)s)",
    )


def _decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speculative-algorithm",
        choices=SPECULATIVE_ALGORITHMS,
        help="enable speculative decoding (every name uses the same built-in draft)",
    )
    parser.add_argument(
        "--speculative-num-draft-tokens",
        type=int,
        help="tokens proposed per speculative step (default: 4)",
    )
    parser.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="batch-invariant arithmetic: cached and fresh prefills agree bit for bit",
    )
    parser.add_argument(
        "--overlap-schedule",
        action="store_true",
        help="feed each request's last output token before caching it, as sglang's "
        "overlapping scheduler (its default) has by then: a finished request's whole "
        "sequence is cached, not all but its last token",
    )
    parser.add_argument(
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
        default=DEFAULTS.attention_backend,
        help="a name only (the arithmetic is the same); with --enable-deterministic-inference "
        "a backend other than triton or fa3 resolves the radix cache off, as sglang does "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--cuda-graph-backend-prefill",
        choices=PREFILL_GRAPH_BACKENDS,
        default=DEFAULTS.cuda_graph_backend_prefill,
        help="build the prefill graph runner (the same numbers through its own code path); "
        "EAGLE and EAGLE3 resolve it off, as sglang does, DSPARK keeps it "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--random-seed",
        type=int,
        default=DEFAULTS.seed,
        help="seed of the model weights (default: %(default)s)",
    )


def _fault(name: str) -> Fault:
    try:
        return parse_fault(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def config_from(args: argparse.Namespace) -> EngineConfig:
    if args.speculative_num_draft_tokens is not None and args.speculative_algorithm is None:
        raise ConfigError(
            "--speculative-num-draft-tokens needs --speculative-algorithm",
            hint="add --speculative-algorithm EAGLE (or drop the draft-token count)",
        )
    try:
        return EngineConfig(
            page_size=args.page_size,
            mamba_track_interval=args.mamba_track_interval,
            chunked_prefill_size=args.chunked_prefill_size,
            sliding_window_size=args.sliding_window,
            context_length=args.context_length,
            max_total_tokens=args.max_total_tokens,
            vocab_size=args.vocab_size,
            disable_radix_cache=args.disable_radix_cache,
            enable_hierarchical_cache=args.enable_hierarchical_cache,
            hicache_write_policy=args.hicache_write_policy,
            hicache_ratio=args.hicache_ratio,
            speculative_algorithm=args.speculative_algorithm,
            speculative_num_draft_tokens=args.speculative_num_draft_tokens,
            enable_deterministic_inference=args.enable_deterministic_inference,
            overlap_schedule=args.overlap_schedule,
            attention_backend=args.attention_backend,
            cuda_graph_backend_prefill=args.cuda_graph_backend_prefill,
            seed=args.random_seed,
            faults=frozenset(args.fault),
        )
    except ValueError as error:
        raise ConfigError(f"serve-reference: {error}") from None


def handle(args: argparse.Namespace) -> int:
    config, resolved = resolve(config_from(args))
    for warning in (*resolved, *config.inactive_faults()):
        print(f"serve-reference: warning: {warning}", file=sys.stderr, flush=True)
    from kl_bitexact.reference.engine import ReferenceEngine
    from kl_bitexact.reference.http import serve

    try:
        serve(ReferenceEngine(config), args.host, args.port)
    except OSError as error:
        raise ServerError(
            f"serve-reference: cannot listen on {args.host}:{args.port}: {error.strerror}",
            hint="pick another --port, or --port 0 for a free one",
        ) from None
    return 0


COMMAND = Command(
    name="serve-reference",
    summary="serve the embedded reference engine (sglang's /generate protocol)",
    description="Serve a small numpy hybrid model (full attention, sliding-window attention, "
    "a recurrent state-space layer) with a radix prefix cache, speaking sglang's native HTTP "
    "protocol, so that suites can run on any machine without a GPU.",
    add_arguments=add_arguments,
    handler=handle,
)

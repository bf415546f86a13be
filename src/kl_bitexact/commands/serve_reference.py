"""`kl-bitexact serve-reference`: the embedded reference engine as an HTTP server."""

from __future__ import annotations

import argparse

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )


COMMAND = Command(
    name="serve-reference",
    summary="serve the embedded reference engine (sglang's /generate protocol)",
    description="Serve a small numpy model with a radix prefix cache, speaking sglang's native "
    "HTTP protocol, so that suites can run on any machine without a GPU.",
    add_arguments=add_arguments,
    handler=not_built_yet("serve-reference", 3),
)

"""Prompts sent apart: each its own request on its own connection, all at once.

One /generate call with several prompts is a batch the client made; separate requests that
arrive together are what a server's scheduler batches itself (or not), as real traffic
does. Each request is bounded as every request is (deadline.py), so the threads end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

from kl_bitexact.run.engines.base import Generation, SamplingParams, TokenIds


@runtime_checkable
class SendsApart(Protocol):
    """An adapter that can send a batch's prompts as concurrent requests of their own."""

    def generate_apart(
        self, prompts: Sequence[TokenIds], params: SamplingParams
    ) -> list[Generation]:
        """Answers in prompt order, each prompt sent alone on its own connection."""
        ...


def at_once(
    prompts: Sequence[TokenIds], alone: Callable[[TokenIds], Generation]
) -> list[Generation]:
    """`alone(prompt)` for every prompt in its own thread, started together; answers in
    prompt order (the first failure is raised once all have ended)."""
    with ThreadPoolExecutor(max_workers=max(1, len(prompts)), thread_name_prefix="apart") as pool:
        futures = [pool.submit(alone, prompt) for prompt in prompts]
        return [future.result() for future in futures]

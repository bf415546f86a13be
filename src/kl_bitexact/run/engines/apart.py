"""Prompts sent apart: each its own request on its own connection, all at once.

One /generate call with several prompts is a batch the client made; separate requests that
arrive together are what a server's scheduler batches itself (or not), as real traffic
does. The threads wait for each other (a barrier, bounded) before any sends, so the requests
are released together; which the server serves first is its choice, and the order their
answers came back is recorded (`Apart.completed`). Each request is bounded as every request
is (deadline.py), so the threads end.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kl_bitexact.run.engines.base import Generation, SamplingParams, TokenIds

# How long a thread waits for the others before sending anyway (they start in microseconds;
# a machine this loaded still sends every request, only less together).
RELEASE_WAIT_S = 10.0


@dataclass(frozen=True)
class Apart:
    """The answers of prompts sent apart, in prompt order, and the order they came back."""

    generations: list[Generation]
    completed: tuple[int, ...]  # prompt indices, first answered first


@runtime_checkable
class SendsApart(Protocol):
    """An adapter that can send a batch's prompts as concurrent requests of their own."""

    def generate_apart(
        self, prompts: Sequence[TokenIds], params: SamplingParams
    ) -> list[Generation]:
        """Answers in prompt order, each prompt sent alone on its own connection."""
        ...

    def send_apart(
        self, prompts: Sequence[TokenIds], params: SamplingParams, *, first: int = 0
    ) -> Apart:
        """As `generate_apart`, with the order the answers came back; the threads are
        started from prompt `first` on (round-robin)."""
        ...


def at_once(
    prompts: Sequence[TokenIds], alone: Callable[[TokenIds], Generation], *, first: int = 0
) -> Apart:
    """`alone(prompt)` for every prompt in its own thread, released together; answers in
    prompt order (the first failure is raised once all have ended). The threads are started
    from prompt `first` on, round-robin: where the server serves what arrives first, a
    caller that moves `first` gives each prompt its turn at the front."""
    count = max(1, len(prompts))
    release = threading.Barrier(count)
    lock = threading.Lock()
    completed: list[int] = []

    def send(index: int) -> Generation:
        with contextlib.suppress(threading.BrokenBarrierError):  # one started late: send
            release.wait(RELEASE_WAIT_S)
        answer = alone(prompts[index])
        with lock:
            completed.append(index)
        return answer

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="apart") as pool:
        total = len(prompts)
        started = [(first + offset) % total for offset in range(total)]
        futures = {index: pool.submit(send, index) for index in started}
        answers = [futures[index].result() for index in range(total)]
    return Apart(answers, tuple(completed))

"""The shrunk workload as a standalone unittest file in sglang's style (pure).

The file is for an engine's own test tree: it imports sglang's test helpers (shipped in
sglang's wheel: `sglang.test.kl_test_utils` flushes, sends a batch and replays uncached;
`sglang.test.kl_multiturn_utils.default_prefill_cache_assert` holds a hit to its count, with
sglang's own message `expected cached_tokens=N, got M`) and `CustomTestCase`, and replays
the workload step by step with the token ids explore sent. A request explore hung up on
mid-prefill cannot go through those helpers (they send whole requests): the file sends it
itself, with a small function of its own on the standard library's socket, as explore's
adapter does (run/engines/abandon.py). It attaches to a running server
named by KL_BITEXACT_BASE_URL (sglang's default port otherwise): the server under test is
started by the caller, as in sglang's CI, with --enable-deterministic-inference, since every
token is compared exactly; or, for a server explore found not deterministic, by the
noise-floor rule (`noise_floor`): the requests that reused a prefix are generated again
cold, alone, after a flush, and the cached path's average KL must stay within factor x that
floor's KL + margin, checked by sglang's own `compare_kl_divergence` with that bound as its
threshold (sglang's strict `<`, where the rule allows equality).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASE_URL_VARIABLE = "KL_BITEXACT_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:30000"


# Rounds of a workload with a batch sent apart: which request the server serves first
# decides the hits, so the file repeats the workload and every round must hold.
APART_ROUNDS = 10


@dataclass(frozen=True)
class ConcreteStep:
    """One step as sent: a flush, a batch of prompts (token ids) in one /generate call,
    prompts each sent on its own connection and hung up on at once (`abandoned`), or each
    sent on its own connection, all at once (`apart`)."""

    prompts: tuple[tuple[int, ...], ...] | None  # None: a flush
    max_new_tokens: int = 0
    abandoned: bool = False
    apart: bool = False

    def as_dict(self) -> dict[str, object]:
        if self.prompts is None:
            return {"flush": True}
        shown: dict[str, object] = {
            "prompts": [list(p) for p in self.prompts],
            "max_new_tokens": self.max_new_tokens,
        }
        if self.abandoned:
            return {**shown, "abandoned": True}
        return {**shown, "apart": True} if self.apart else shown


def file_name(index: int) -> str:
    return f"test_explore_finding_{index}.py"


def unittest_text(
    *,
    index: int,
    located: str,
    steps: Sequence[ConcreteStep],
    expected_cached: Mapping[tuple[int, int], int],
    page_size: int = 1,
    noise_floor: tuple[float, float] | None = None,
) -> str:
    """The file's Python source. `expected_cached`: (step, slot) -> the cached_tokens the
    geometry allows for a request explore found miscounted (held to it exactly, as sglang's
    multi-turn kits hold a hit; in a batch sent apart, where the order decides the hit,
    every request is held to the geometry's bound instead: whole pages of `page_size`, at
    most what it shares with the sequences served before it or beside it). `noise_floor`:
    (factor, margin) for a server that is not deterministic; None compares every logprob
    exactly."""
    data = json.dumps([step.as_dict() for step in steps])
    cached = json.dumps([[step, slot, count] for (step, slot), count in expected_cached.items()])
    return _TEMPLATE.format(
        located=located.replace('"""', "'''").replace("\\", "/"),
        index=index,
        variable=BASE_URL_VARIABLE,
        default=DEFAULT_BASE_URL,
        steps=repr(data),
        cached=repr(cached),
        rounds=APART_ROUNDS if any(step.apart for step in steps) else 1,
        page_size=page_size,
        floor=repr(noise_floor),
        server=_DETERMINISTIC if noise_floor is None else _NOT_DETERMINISTIC,
    )


_DETERMINISTIC = """\
every answered sequence (prompt + answer) is replayed uncached, and each generated token's
logprob must equal its replay's bit for bit. A request explore found miscounted must
report the cached_tokens its geometry allows; a request sent apart, whose hit depends on
which request the server served first, is held to the geometry's bound, and the workload
is run ROUNDS times.

Run it against the server under test, started with --enable-deterministic-inference and its"""
_NOT_DETERMINISTIC = """\
every answered sequence (prompt + answer) is replayed uncached. The server was not
deterministic, so the rule is kl-bitexact's noise floor: the requests that reused a prefix
are generated again cold (after a flush, one at a time) and replayed; the cached ones'
average KL must stay within NOISE_FLOOR's factor x the cold ones' + its margin (sglang's
compare_kl_divergence, with that bound as its threshold). A request explore found miscounted must
report the cached_tokens its geometry allows; a request sent apart, whose hit depends on
which request the server served first, is held to the geometry's bound, and the workload
is run ROUNDS times.

Run it against the server under test, started as when it was found, with its"""


_TEMPLATE = '''"""Found by `kl-bitexact explore`: {located}

The smallest workload explore found, with the token ids it sent: each step is a flush, one
/generate batch (greedy), requests hung up on mid-prefill (each sent on its own connection,
the client hanging up at once, as a client that disconnects does), or requests sent apart
(each its own /generate on its own connection, all at once); at the end
{server}
radix cache on (the same page size, chunk size and track interval as when it was found):

    {variable}=http://127.0.0.1:30000 python3 -m pytest {file}

It uses sglang's own test helpers (sglang.test.*, in sglang's wheel).
"""

import json
import os
import socket
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from sglang.test.kl_multiturn_utils import default_prefill_cache_assert
from sglang.test.kl_test_utils import (
    _extract_output_logprobs,
    _flush_cache,
    _generate,
    _get_input_logprobs,
    compare_kl_divergence,
)
from sglang.test.test_utils import CustomTestCase

BASE_URL = os.environ.get("{variable}", "{default}")
# [{{"flush": true}} | {{"prompts": [[ids]], "max_new_tokens": N, "abandoned"/"apart": true?}}, ...]
STEPS = json.loads({steps})
# [[step, slot, cached_tokens the geometry allows], ...]
EXPECTED_CACHED = {{(step, slot): count for step, slot, count in json.loads({cached})}}
# (factor, margin) of the noise-floor rule; None: every logprob compared exactly.
NOISE_FLOOR = {floor}
# How long a request hung up on may keep the server busy before the test gives up on it.
HANG_UP_WAIT_S = 120.0
# Rounds of the workload: more than one when a batch is sent apart, since which request the
# server serves first decides the hits; every round must hold, and one must reach a hit
# only a request sent beside it could have left.
ROUNDS = {rounds}
PAGE_SIZE = {page_size}
# How long the requests of a batch sent apart wait for each other before sending anyway.
RELEASE_WAIT_S = 10.0


def hang_up(prompt, max_new_tokens):
    """POST one /generate of `prompt` on its own connection and hang up at once (a TCP FIN,
    what a client that disconnects sends), then wait - bounded - until the server closes
    the connection: it is done with the request, and what it cached of it is in place."""
    address = urlsplit(BASE_URL)
    sampling = {{"temperature": 0.0, "max_new_tokens": max_new_tokens}}
    body = json.dumps({{"input_ids": prompt, "sampling_params": sampling}}).encode()
    head = (
        f"POST /generate HTTP/1.1\\r\\nHost: {{address.netloc}}\\r\\n"
        f"Content-Type: application/json\\r\\nContent-Length: {{len(body)}}\\r\\n"
        "Connection: close\\r\\n\\r\\n"
    ).encode()
    with socket.create_connection((address.hostname, address.port or 80), timeout=30) as sock:
        # Hold the request's last bytes until the hang-up (Linux's TCP_CORK), so they and
        # the FIN leave together: the server meets the hang-up while still in the prefill.
        cork = getattr(socket, "TCP_CORK", None)
        if cork is not None:
            sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        if cork is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, cork, 0)
            except OSError:
                pass
        if not _closed_within(sock, HANG_UP_WAIT_S):
            raise AssertionError(
                f"a request hung up on kept the server busy over {{HANG_UP_WAIT_S}} s"
            )


def _closed_within(sock, wait_s):
    """Whether the server closes the connection within `wait_s` (any answer is dropped)."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def send_apart(prompts, max_new_tokens, first):
    """Each prompt its own /generate through sglang's helper, on its own connection, in
    threads released together (the server, not the client, decides what runs first), started
    from prompt `first` on; the answers in prompt order."""
    release = threading.Barrier(len(prompts))

    def alone(prompt):
        try:
            release.wait(RELEASE_WAIT_S)
        except threading.BrokenBarrierError:
            pass  # a thread started late: send anyway
        return _generate(BASE_URL, [prompt], max_new_tokens, return_logprob=True)[0]

    order = [(first + offset) % len(prompts) for offset in range(len(prompts))]
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        sent = {{index: pool.submit(alone, prompts[index]) for index in order}}
        return [sent[index].result() for index in range(len(prompts))]


def most_reusable(prompt, before):
    """The largest cached prefix the geometry allows: whole pages of the longest prefix
    `prompt` shares with a sequence of `before`, leaving one prompt token to compute."""
    shared = 0
    for seen in before:
        common = 0
        for ours, theirs in zip(prompt, seen):
            if ours != theirs:
                break
            common += 1
        shared = max(shared, common)
    return max(min(shared, len(prompt) - 1), 0) // PAGE_SIZE * PAGE_SIZE


class TestExploreFinding{index}(CustomTestCase):
    def test_explored_workload(self):
        reached = sum(self.run_workload(r) for r in range(ROUNDS))
        if any(spec.get("apart") for spec in STEPS):
            self.assertGreater(
                reached,
                0,
                f"not exercised: in none of {{ROUNDS}} rounds did a request sent apart reuse "
                "a prefix only another request beside it had left (the server served them "
                "together or in an order that shares nothing)",
            )

    def run_workload(self, round_index):
        """The workload once, every token and count checked; whether a request sent apart
        reused what only another request of its batch could have left. Each round starts a
        batch sent apart from another prompt (a server serving what arrives first then gives
        each its turn at the front)."""
        label = f"round {{round_index + 1}}"
        _flush_cache(BASE_URL)
        sequences, decoded, since_flush, served = [], [], [], []
        reached = False
        for step, spec in enumerate(STEPS):
            if spec.get("flush"):
                _flush_cache(BASE_URL)
                since_flush = []
                continue
            prompts, new = spec["prompts"], spec["max_new_tokens"]
            if spec.get("abandoned"):
                for prompt in prompts:
                    hang_up(prompt, new)
                since_flush += prompts
                continue
            if spec.get("apart"):
                results = send_apart(prompts, new, round_index % len(prompts))
            else:
                results = _generate(BASE_URL, prompts, new, return_logprob=True)
            self.assertEqual(len(results), len(prompts))
            answered = [p + r["output_ids"] for p, r in zip(prompts, results)]
            for slot, (prompt, result) in enumerate(zip(prompts, results)):
                where = f"{{label}} step {{step}} request {{slot}}"
                if spec.get("apart"):
                    beside = answered[:slot] + answered[slot + 1 :]
                    reached |= self.hold_to_geometry(result, prompt, since_flush, beside, where)
                elif (expected := EXPECTED_CACHED.get((step, slot))) is not None:
                    default_prefill_cache_assert(result, expected, where)
                sequences.append(answered[slot])
                decoded.append(_extract_output_logprobs(result))
                served.append((prompt, new, result["meta_info"].get("cached_tokens")))
            since_flush += answered
        replayed = _get_input_logprobs(BASE_URL, sequences, decoded)
        if NOISE_FLOOR is not None:
            self.within_noise_floor(served, decoded, replayed)
            return reached
        for index, (ours, theirs) in enumerate(zip(decoded, replayed)):
            where = f"{{label}} sequence {{index}}"
            self.assertEqual(ours, theirs, f"{{where}}: decoded vs uncached replay")
        return reached

    def hold_to_geometry(self, result, prompt, before, beside, where):
        """A request sent apart: its hit depends on what the server served first, so it is
        held to what the geometry allows (whole pages, at most the prefix it shares with a
        sequence served before it or beside it); whether it reused more than `before` left."""
        cached = result["meta_info"]["cached_tokens"]
        allowed = most_reusable(prompt, before + beside)
        self.assertTrue(
            cached % PAGE_SIZE == 0 and cached <= allowed,
            f"{{where}}: expected cached_tokens a multiple of {{PAGE_SIZE}}, at most "
            f"{{allowed}}, got {{cached}}",
        )
        return cached > most_reusable(prompt, before)

    def within_noise_floor(self, served, decoded, replayed):
        """The requests that reused a prefix (or did not say) against the same prompts
        generated cold and alone; what cannot be judged fails, never passes."""
        cached = [index for index, (_, _, hit) in enumerate(served) if hit != 0]
        if not cached:
            self.fail("no request reused a cached prefix: the noise floor has nothing to judge")
        cold_sequences, cold_decoded = [], []
        for index in cached:
            prompt, new, _ = served[index]
            _flush_cache(BASE_URL)
            [cold] = _generate(BASE_URL, [prompt], new, return_logprob=True)
            cold_sequences.append(prompt + cold["output_ids"])
            cold_decoded.append(_extract_output_logprobs(cold))
        cold_replayed = _get_input_logprobs(BASE_URL, cold_sequences, cold_decoded)
        floor = average_kl(cold_replayed, cold_decoded)
        factor, margin = NOISE_FLOOR
        bound = factor * floor + margin
        print(f"noise floor {{floor}}: the cached path must stay within {{bound}}")
        compare_kl_divergence(
            [replayed[index] for index in cached],
            [decoded[index] for index in cached],
            {{"explore": {{"kl_div": bound}}}},
            "explore",
            "the cached path against its noise floor",
        )


def average_kl(replayed, decoded):
    """The average over requests of sglang's per-request KL estimate (as in
    compare_kl_divergence), without its assertion: the noise floor itself."""
    import numpy as np

    values = []
    for theirs, ours in zip(replayed, decoded):
        logr = np.array(theirs) - np.array(ours)
        values.append(float(np.mean((np.exp(logr) - 1) - logr)))
    if not values or not np.isfinite(sum(values)):
        raise AssertionError(f"the noise floor cannot bound anything: {{values}}")
    return sum(values) / len(values)


if __name__ == "__main__":
    unittest.main()
'''.replace("{file}", "test_explore_finding_{index}.py")

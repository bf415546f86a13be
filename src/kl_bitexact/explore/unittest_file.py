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
token is compared exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASE_URL_VARIABLE = "KL_BITEXACT_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:30000"


@dataclass(frozen=True)
class ConcreteStep:
    """One step as sent: a flush, a batch of prompts (token ids) in one /generate call, or
    prompts each sent on its own connection and hung up on at once (`abandoned`)."""

    prompts: tuple[tuple[int, ...], ...] | None  # None: a flush
    max_new_tokens: int = 0
    abandoned: bool = False

    def as_dict(self) -> dict[str, object]:
        if self.prompts is None:
            return {"flush": True}
        shown: dict[str, object] = {
            "prompts": [list(p) for p in self.prompts],
            "max_new_tokens": self.max_new_tokens,
        }
        return {**shown, "abandoned": True} if self.abandoned else shown


def file_name(index: int) -> str:
    return f"test_explore_finding_{index}.py"


def unittest_text(
    *,
    index: int,
    located: str,
    steps: Sequence[ConcreteStep],
    expected_cached: Mapping[tuple[int, int], int],
) -> str:
    """The file's Python source. `expected_cached`: (step, slot) -> the cached_tokens the
    geometry allows for a request explore found miscounted (held to it exactly, as sglang's
    multi-turn kits hold a hit)."""
    data = json.dumps([step.as_dict() for step in steps])
    cached = json.dumps([[step, slot, count] for (step, slot), count in expected_cached.items()])
    return _TEMPLATE.format(
        located=located.replace('"""', "'''").replace("\\", "/"),
        index=index,
        variable=BASE_URL_VARIABLE,
        default=DEFAULT_BASE_URL,
        steps=repr(data),
        cached=repr(cached),
    )


_TEMPLATE = '''"""Found by `kl-bitexact explore`: {located}

The smallest workload explore found, with the token ids it sent: each step is a flush, one
/generate batch (greedy), or requests hung up on mid-prefill (each sent on its own
connection, the client hanging up at once, as a client that disconnects does); at the end
every answered sequence (prompt + answer) is replayed uncached, and each generated token's
logprob must equal its replay's bit for bit. A request explore found miscounted must
report the cached_tokens its geometry allows.

Run it against the server under test, started with --enable-deterministic-inference and its
radix cache on (the same page size, chunk size and track interval as when it was found):

    {variable}=http://127.0.0.1:30000 python3 -m pytest {file}

It uses sglang's own test helpers (sglang.test.*, in sglang's wheel).
"""

import json
import os
import socket
import time
import unittest
from urllib.parse import urlsplit

from sglang.test.kl_multiturn_utils import default_prefill_cache_assert
from sglang.test.kl_test_utils import (
    _extract_output_logprobs,
    _flush_cache,
    _generate,
    _get_input_logprobs,
)
from sglang.test.test_utils import CustomTestCase

BASE_URL = os.environ.get("{variable}", "{default}")
# [{{"flush": true}} | {{"prompts": [[token ids]], "max_new_tokens": N, "abandoned": true?}}, ...]
STEPS = json.loads({steps})
# [[step, slot, cached_tokens the geometry allows], ...]
EXPECTED_CACHED = {{(step, slot): count for step, slot, count in json.loads({cached})}}
# How long a request hung up on may keep the server busy before the test gives up on it.
HANG_UP_WAIT_S = 120.0


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


class TestExploreFinding{index}(CustomTestCase):
    def test_explored_workload(self):
        _flush_cache(BASE_URL)
        sequences, decoded = [], []
        for step, spec in enumerate(STEPS):
            if spec.get("flush"):
                _flush_cache(BASE_URL)
                continue
            prompts, new = spec["prompts"], spec["max_new_tokens"]
            if spec.get("abandoned"):
                for prompt in prompts:
                    hang_up(prompt, new)
                continue
            results = _generate(BASE_URL, prompts, new, return_logprob=True)
            self.assertEqual(len(results), len(prompts))
            for slot, (prompt, result) in enumerate(zip(prompts, results)):
                expected = EXPECTED_CACHED.get((step, slot))
                if expected is not None:
                    label = f"step {{step}} request {{slot}}"
                    default_prefill_cache_assert(result, expected, label)
                sequences.append(prompt + result["output_ids"])
                decoded.append(_extract_output_logprobs(result))
        replayed = _get_input_logprobs(BASE_URL, sequences, decoded)
        for index, (ours, theirs) in enumerate(zip(decoded, replayed)):
            self.assertEqual(ours, theirs, f"sequence {{index}}: decoded vs uncached replay")


if __name__ == "__main__":
    unittest.main()
'''.replace("{file}", "test_explore_finding_{index}.py")

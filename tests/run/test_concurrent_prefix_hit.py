"""The `concurrent_prefix_hit` check against real reference servers: requests sent at once on
their own connections, every round recorded as observed; red where a hit the order made is
miscounted, green on a healthy server, not exercised where the server batched the requests
together so that none reused another's prefix, and bad suite input refused with exit 2."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from batching_front import batching_front

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status, TestResult

Cli = Callable[..., subprocess.CompletedProcess[str]]
# A prefix of 64 tokens is 4 pages and exactly one prefill chunk: the reuse that
# cached-tokens-off-by-one reports one short.
SERVER = ["--enable-deterministic-inference", "--page-size", "16", "--chunked-prefill-size", "64"]
TEST = """      check: concurrent_prefix_hit
      max_new_tokens: 4
      temperature: 0
      exact: true
      vocab_size: 320
"""


def suite_file(tmp_path: Path, keys: str) -> Path:
    path = tmp_path / "concurrent.yaml"
    path.write_text(
        "- name: concurrent\n  server:\n    engine: sglang\n    base_url: http://127.0.0.1:9\n"
        f"  tests:\n    - name: apart\n{TEST}{keys}"
    )
    return path


SHARED = "      samples: 2\n      prefix_tokens: 64\n      prompt_tokens: [8, 12]\n"


def run(cli: Cli, suite: Path, url: str, out: Path) -> tuple[int, TestResult]:
    done = cli(["run", str(suite), "--base-url", url, "--out", str(out)])
    [(_, test)] = results_io.load(out / "results.json").all_tests()
    return done.returncode, test


@pytest.mark.parametrize("fault", [True, False])
def test_red_only_where_the_hit_one_request_left_another_is_miscounted(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path, fault: bool
) -> None:
    flags = ["--fault", "cached-tokens-off-by-one"] if fault else []
    server = reference_server(*SERVER, *flags)
    code, test = run(cli, suite_file(tmp_path, SHARED), server.url, tmp_path / "out")
    seen = test.concurrency
    assert seen is not None and len(seen.rounds) == 3 and seen.reached == 3, test.message
    for one in seen.rounds:
        # The engine serves one request at a time: the second reuses the first's 4 pages.
        assert sorted(one.completed) == [0, 1] and one.concurrent_hits == 1
        assert sorted(c or 0 for c in one.cached_tokens) == [0, 63 if fault else 64]
        assert one.diverged == ()
    assert test.exact is not None and test.exact.tokens == 24 and test.exact.mismatched == 0
    if fault:
        assert code == 1 and test.status is Status.FAILED
        assert seen.failed == 3 and all(len(one.miscounted) == 1 for one in seen.rounds)
        assert "expected cached_tokens a multiple of the page size 16, at most 64, got 63" in (
            test.message
        )
    else:
        assert code == 0 and test.status is Status.PASSED, test.message
        assert seen.failed == 0
    assert "3 of 3 reached a concurrent hit" in test.message


def test_a_server_that_batches_the_requests_together_never_reaches_the_shape(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Both requests served in one step: neither reuses the other's prefix, so no round
    reached a concurrent hit and the test is not exercised - never green, even though every
    token matched and every count is allowed."""
    server = reference_server(*SERVER, "--fault", "cached-tokens-off-by-one")
    with batching_front(server.url, gather=2) as front:
        code, test = run(cli, suite_file(tmp_path, SHARED), front.url, tmp_path / "out")
    assert front.batches.count(2) == 3  # each round's two requests went on as one batch
    assert test.status is Status.NOT_EXERCISED and code == 1, test.message
    assert "none of 3 concurrent round(s) reached a concurrent hit" in test.message
    assert "raise `rounds`" in test.hint
    seen = test.concurrency
    assert seen is not None and [one.cached_tokens for one in seen.rounds] == [(0, 0)] * 3


def test_warmed_prompts_are_cached_first_and_a_hit_on_them_is_the_shape(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Prompts sharing only what is warmed: each must hit the warmed prefix beside the other
    request sent at once."""
    prefix = list(range(100, 164))
    (tmp_path / "warm.json").write_text(json.dumps([prefix]))
    prompts = [prefix + list(range(200, 210)), prefix + list(range(210, 222))]
    (tmp_path / "prompts.json").write_text(json.dumps(prompts))
    keys = "      samples: 2\n      prompts: prompts.json\n      warm: warm.json\n      rounds: 2\n"
    server = reference_server(*SERVER)
    code, test = run(cli, suite_file(tmp_path, keys), server.url, tmp_path / "out")
    assert code == 0 and test.status is Status.PASSED, test.message
    seen = test.concurrency
    assert seen is not None and seen.shape.startswith("a cache hit on the warmed prompts")
    assert [one.cached_tokens for one in seen.rounds] == [(64, 64)] * 2
    assert all(one.reached and one.concurrent_hits == 0 for one in seen.rounds)


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (SHARED + "      rounds: 0\n", "tests[0].rounds: expected an integer >= 1, got 0"),
        (SHARED + "      rounds: 21\n", "tests[0].rounds: expected an integer from 1 to 20"),
        ("      samples: 65\n", "tests[0].samples: 65 requests at once: at most 64"),
        (SHARED + "      warm: missing.json\n", "tests[0].warm: "),
        ("      prompts: p.json\n      prefix_tokens: 8\n", "tests[0].prefix_tokens: shapes"),
        (SHARED + "      separator_ids: [1]\n", "does not apply to check: concurrent_prefix_hit"),
    ],
)
def test_bad_suite_input_names_the_file_and_key_with_exit_2(
    cli: Cli, tmp_path: Path, keys: str, said: str
) -> None:
    (tmp_path / "p.json").write_text("[[1, 2, 3]]")
    suite = suite_file(tmp_path, keys)
    done = cli(["run", str(suite), "--out", str(tmp_path / "out")])
    assert done.returncode == 2, done.stderr
    assert str(suite) in done.stderr and said in done.stderr, done.stderr

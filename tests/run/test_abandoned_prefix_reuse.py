"""The `abandoned_prefix_reuse` check against real reference servers: red only where an
abandoned prefill is cached as if complete; cannot tell where nothing was abandoned."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

Cli = Callable[..., subprocess.CompletedProcess[str]]
SERVER = ["--enable-deterministic-inference", "--chunked-prefill-size", "64"]


def suite_file(tmp_path: Path, lengths: tuple[int, int]) -> Path:
    path = tmp_path / "abandon.yaml"
    path.write_text(
        f"""- name: abandon
  server:
    engine: sglang
    base_url: http://127.0.0.1:9
  tests:
    - name: reuse
      check: abandoned_prefix_reuse
      samples: 3
      prompt_tokens: [{lengths[0]}, {lengths[1]}]
      max_new_tokens: 6
      temperature: 0
      exact: true
      vocab_size: 320
      min_cache_hit_ratio: 1.0
"""
    )
    return path


def run(cli: Cli, suite: Path, url: str, out: Path) -> tuple[int, Any]:
    done = cli(["run", str(suite), "--base-url", url, "--out", str(out)])
    [(_, test)] = results_io.load(out / "results.json").all_tests()
    return done.returncode, test


@pytest.mark.parametrize("fault", [True, False])
def test_red_only_on_the_server_that_caches_an_abandoned_prefill_as_complete(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path, fault: bool
) -> None:
    flags = ["--fault", "reuse-after-abandoned-prefill"] if fault else []
    server = reference_server(*SERVER, *flags)
    code, test = run(cli, suite_file(tmp_path, (150, 220)), server.url, tmp_path / "out")
    assert server.stderr().count("client disconnected after prefill chunk") == 3
    assert test.cache_hits is not None and test.cache_hits.hit == 3, test.message
    assert test.exact is not None
    if fault:
        assert code == 1 and test.status is Status.FAILED
        assert test.exact.mismatched > 0
    else:
        assert code == 0 and test.status is Status.PASSED, test.message
        assert test.exact.mismatched == 0 and test.exact.tokens == 18


def test_prompts_no_longer_than_a_chunk_abandon_nothing_and_cannot_tell(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = reference_server(*SERVER, "--fault", "reuse-after-abandoned-prefill")
    code, test = run(cli, suite_file(tmp_path, (40, 60)), server.url, tmp_path / "out")
    assert code == 2 and test.status is Status.NOT_RUN  # "did not measure": never a pass
    assert "answered all 3 request(s) the client hung up on" in test.message

"""A finding whose failing batch was sent apart (concurrent requests) is handed back as a
`concurrent_prefix_hit` test, the workload's earlier sequences warmed first, and as an
sglang-style unittest file that sends the batch apart itself, in rounds; each fails on the
faulty server and passes on a healthy one (real processes, sglang's own helpers)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from explore_unittest import assert_unittest_fails_only_on

from kl_bitexact.commands import explore as explore_command
from kl_bitexact.explore.execute import execute
from kl_bitexact.explore.geometry import read_geometry
from kl_bitexact.explore.kinds import kind_of
from kl_bitexact.explore.search import Found
from kl_bitexact.explore.workload import APART, Batch, Prompt, Tokens, Workload
from kl_bitexact.run.engines.sglang import SglangEngine

GEOMETRY = ["--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16"]
MISCOUNT = ["--fault", "cached-tokens-off-by-one"]
Cli = Callable[..., subprocess.CompletedProcess[str]]
# A cold request, then two prompts of one root sharing 64 tokens (4 pages, one prefill
# chunk) sent apart: whichever the server serves second reuses the first's 64 tokens, which
# cached-tokens-off-by-one reports as 63.
WORKLOAD = Workload(
    (
        Batch((Prompt(0, 0, 8),), 2),
        Batch((Prompt(1, 64, 8), Prompt(1, 64, 12)), 4, APART),
    )
)


def test_a_finding_sent_apart_is_handed_back_as_a_concurrent_check_red_only_where_faulty(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    faulty = reference_server(*GEOMETRY, *MISCOUNT)
    healthy = reference_server(*GEOMETRY)
    engine = SglangEngine(faulty.url, request_timeout=60)
    geometry = read_geometry(engine.server_info(), faulty.url)
    tokens = Tokens(geometry.vocab_size, 1)
    outcome = execute(engine, WORKLOAD, tokens, geometry)
    [miscount] = outcome.miscounts
    assert miscount.served.sent == APART and miscount.observed == 63
    found = Found(WORKLOAD, miscount, kind_of(miscount, geometry))
    server = {"engine": "sglang", "base_url": faulty.url}
    files = explore_command.Files(tmp_path, 1)
    handed = explore_command._hand_back_apart(engine, geometry, found, outcome, server, files)
    assert handed["handback_fails"], handed["handback"]
    assert handed["handback_rounds"] == {"rounds": 10, "failed": 10, "reached": 10}
    [suite] = yaml.safe_load((tmp_path / "finding-1.yaml").read_text())
    [test] = suite["tests"]
    assert test["check"] == "concurrent_prefix_hit" and test["rounds"] == 10
    warm = json.loads((tmp_path / test["warm"]).read_text())
    assert [len(sequence) for sequence in warm] == [8 + 2]  # the cold request, its answer
    suite_path = str(tmp_path / "finding-1.yaml")
    red = cli(["run", suite_path, "--base-url", faulty.url, "--out", str(tmp_path / "f")])
    assert red.returncode == 1, red.stdout
    green = cli(["run", suite_path, "--base-url", healthy.url, "--out", str(tmp_path / "h")])
    assert green.returncode == 0, green.stdout
    test_file = tmp_path / "test_explore_finding_1.py"
    source = explore_command._unittest_text(found, outcome, tokens, geometry, 1)
    assert '"apart": true' in source and "ROUNDS = 10" in source and "PAGE_SIZE = 16" in source
    assert "class TestExploreFinding1(" in source
    test_file.write_text(source)
    assert_unittest_fails_only_on(test_file, faulty.url, healthy.url)

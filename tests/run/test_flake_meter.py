"""`run --repeat N` against real reference-server processes (issue 19, the flake meter).

- deterministic mode: every repeat bit-identical, nothing flaky, exit 0;
- plain (float32 BLAS) mode: decode differs from the replay, but the repeats agree: the
  test says it is repeat-stable while replay-unstable;
- `--fault order-dependent-decode` (answers depend on what the server served before):
  flaky, with the changed positions, the KL spread and per-repeat evidence in results.json
  and the comment; `run` and `report` give one verdict under one policy (issue 27): a
  flaky test whose repeats all passed gates only with `--fail-on ...,flaky`;
- `--relaunch`: one launch per repeat.
"""

from __future__ import annotations

import json
from pathlib import Path

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

TEST = (
    "{name: match, check: match, samples: 3, prompt_tokens: 40, max_new_tokens: 8, vocab_size: 256}"
)


def suite_file(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "suite.yaml"
    listed = ", ".join(args)
    path.write_text(f"name: s\nserver: {{engine: reference, args: [{listed}]}}\ntests: [{TEST}]\n")
    return path


def run(cli, tmp_path: Path, *extra: str, args=("--enable-deterministic-inference",)):
    out = tmp_path / "out"
    finished = cli(["run", str(suite_file(tmp_path, *args)), "--out", str(out), *extra])
    [(_, test)] = results_io.load(out / "results.json").all_tests()
    return finished, test, out


def test_deterministic_repeats_are_bit_identical(cli, tmp_path):
    finished, test, _ = run(cli, tmp_path, "--repeat", "5")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert test.status is Status.PASSED and test.repeats is not None
    assert (test.repeats.count, test.repeats.changed) == (5, 0)
    assert test.repeats.positions == 3 * 8
    assert "5 repeats on one launch bit-identical (24 positions)" in finished.stdout


def test_plain_mode_is_repeat_stable_while_replay_unstable(cli, tmp_path):
    finished, test, _ = run(cli, tmp_path, "--repeat", "3", args=())
    assert test.status is Status.PASSED and test.repeats is not None
    assert test.repeats.changed == 0 and test.exact is not None and test.exact.mismatched > 0
    assert "repeat-stable while replay-unstable" in test.message
    assert "repeat-stable while replay-unstable" in finished.stdout


def test_an_order_dependent_engine_is_reported_flaky_with_evidence(cli, tmp_path):
    args = ("--enable-deterministic-inference", "--fault", "order-dependent-decode")
    finished, test, out = run(cli, tmp_path, "--repeat", "4", args=args)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert test.status is Status.FLAKY and test.repeats is not None
    evidence = test.repeats
    assert 0 < evidence.changed <= evidence.positions == 24
    assert evidence.statuses == (Status.PASSED,) * 4  # each repeat alone looks green
    # One ulp moves k3 by less than float64 resolves: only the bit comparison sees it.
    assert evidence.first_change.startswith("repeat 2 vs 1: sample")
    assert "FLAKY" in finished.stdout and "changed positions" in finished.stdout
    comment = (out / "report.md").read_text()
    assert "🎲 1 flaky" in comment and "| repeat | status | avg KL | cache hits |" in comment
    # The gate's policy decides: report-only flakiness passes, `,flaky` gates.
    results = str(out / "results.json")
    assert cli(["report", results]).returncode == 0
    gated = cli(["report", results, "--fail-on", "regression,flaky", "--json"])
    assert gated.returncode == 1
    verdict = json.loads(gated.stdout)
    assert (
        verdict["reasons"] == ["1 flaky (repeats disagree)"] and verdict["policy"]["flaky"] is True
    )


def test_run_and_report_give_one_verdict_under_each_policy(cli, tmp_path):
    # Issue 27: `run --repeat 3` with an order-dependent fault exited 1 while `report` on
    # its results.json said "gate passed". Both now ask the same rule, under the same policy.
    args = ("--enable-deterministic-inference", "--fault", "order-dependent-decode")
    for fail_on in ("regression", "regression,flaky", "failure,flaky", "never"):
        where = tmp_path / fail_on.replace(",", "-")
        where.mkdir()
        finished, test, out = run(cli, where, "--repeat", "3", "--fail-on", fail_on, args=args)
        assert test.status is Status.FLAKY, finished.stdout
        reported = cli(["report", str(out / "results.json"), "--fail-on", fail_on])
        assert finished.returncode == reported.returncode, (fail_on, finished.stdout)
        assert finished.returncode == (1 if "flaky" in fail_on else 0), fail_on


def test_relaunch_runs_each_repeat_on_its_own_launch(cli, tmp_path):
    finished, test, _ = run(cli, tmp_path, "--repeat", "2", "--relaunch")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert test.repeats is not None and (test.repeats.count, test.repeats.launches) == (2, 2)
    assert test.status is Status.PASSED and test.repeats.changed == 0


def test_bad_repeat_options_are_refused_with_exit_2(cli, tmp_path):
    path = str(suite_file(tmp_path, "--enable-deterministic-inference"))
    refused = cli(["run", path, "--repeat", "0"])
    assert refused.returncode == 2 and "not a whole number from 1 to 100" in refused.stderr
    lonely = cli(["run", path, "--relaunch", "--out", str(tmp_path / "o")])
    assert lonely.returncode == 2 and "--relaunch needs --repeat" in lonely.stderr
    attached = cli(["run", path, "--repeat", "2", "--relaunch", "--base-url", "http://x:1"])
    assert attached.returncode == 2 and "cannot restart the server" in attached.stderr

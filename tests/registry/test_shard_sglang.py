"""`shard --format sglang`, proven with sglang's own code from its wheel (issue 16, problem 7).

run_suite.py itself is not in the wheel; its steps around the partitioner are three lines
each (select by backend, suite, nightly and disabled; read `est[suite]` of the model file,
paths joined to the repository root; call `auto_partition` per partition id), repeated here
as it performs them. The parser (`collect_tests`) and the partitioner (`auto_partition`)
are sglang's, from the pinned wheel.
"""

from __future__ import annotations

import json
import os

import pytest

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

SUITE = "base-c-test-8-gpu-h200"
H200 = "test/registered/h200"


def shard_sglang(cli, root, suite, *args):
    model = root / "model.json"
    command = ["shard", "--root", str(root), "--suite", suite, "--format", "sglang"]
    result = cli([*command, "--partition-model-file", str(model), *args])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), json.loads(model.read_text())


def run_suite_partitions(ci, root, suite, registered, model, size, nightly=False):
    """What `run_suite.py --suite SUITE --auto-partition-id I --auto-partition-size N
    --partition-model-file model.json` runs for each I, with sglang's parser and LPT."""
    tests = ci.collect_tests([str(root / path) for path in registered])
    selected = [
        t
        for t in tests
        if t.backend == ci.HWBackend.CUDA
        and t.effective_suite == suite
        and t.nightly == nightly
        and t.disabled is None
    ]
    live = {
        key if key.startswith("group:") else os.path.join(str(root), key): float(seconds)
        for key, seconds in model["est"][suite].items()
    }
    return [
        [os.path.relpath(t.filename, root) for t in ci.auto_partition(selected, i, size, live)]
        for i in range(size)
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_run_suite_computes_exactly_our_partitions(cli, make_repo, sglang_oracle, size):
    ci = sglang_oracle("ci.ci_register")
    root = make_repo("sglang-partition")
    output, model = shard_sglang(cli, root, SUITE, "--partitions", str(size))
    entry = output[SUITE]
    assert (entry["arr"], entry["size"], entry["max_parallel"]) == (
        list(range(size)),
        size,
        size,
    )
    registered = sorted(f"{H200}/{p.name}" for p in (root / H200).iterdir())
    assert run_suite_partitions(ci, root, SUITE, registered, model, size) == entry["files"]
    planned = {file for files in entry["files"] for file in files}
    assert f"{H200}/test_lima_disabled.py" not in planned  # disabled
    assert f"{H200}/test_mike_nightly.py" not in planned  # another cadence
    assert len(planned) == 11


def test_measured_durations_reach_run_suite_through_the_model(cli, make_repo, sglang_oracle):
    ci = sglang_oracle("ci.ci_register")
    root = make_repo("sglang-partition")
    golf = f"{H200}/test_golf.py"
    runs = root / "results.json"
    results_io.write_atomic(
        r.Results(
            suites=(
                r.SuiteResult(
                    name=SUITE,
                    server=r.ServerInfo(engine="sglang"),
                    tests=(
                        r.TestResult(
                            id=f"{golf}::TestGolf::test_golf",
                            check="match",
                            status=r.Status.PASSED,
                            duration_s=2100.0,
                        ),
                    ),
                ),
            )
        ),
        runs,
    )
    output, model = shard_sglang(cli, root, SUITE, "--partitions", "3", "--durations", str(runs))
    assert model["est"][SUITE][golf] == 2100.0
    assert output[SUITE]["files"][0][0] == golf  # now the longest unit, first placed
    registered = sorted(f"{H200}/{p.name}" for p in (root / H200).iterdir())
    assert run_suite_partitions(ci, root, SUITE, registered, model, 3) == output[SUITE]["files"]


def test_nightly_cadence_plans_only_nightly_files(cli, make_repo):
    root = make_repo("sglang-partition")
    output, _ = shard_sglang(cli, root, SUITE, "--partitions", "1", "--nightly")
    assert output[SUITE]["files"] == [[f"{H200}/test_mike_nightly.py"]]


def test_groups_are_deducted_as_sglang_does_and_partitioned_as_its_lpt(
    cli, make_repo, sglang_oracle
):
    # The pinned wheel's parser predates in_process_group, so the units are handed to its
    # auto_partition directly: a group is one entry named group:<key>, as sglang bundles it.
    ci = sglang_oracle("ci.ci_register")
    root = make_repo()
    suite = "extra-b-test-4-gpu-b200"
    for index, est in enumerate([900, 650, 300, 990]):
        (root / f"test/registered/kl/test_more_{index}.py").write_text(
            f'register_cuda_ci(est_time={est}, stage="extra-b", runner_config="4-gpu-b200")\n'
            'if __name__ == "__main__":\n    main()\n'
        )
    output, model = shard_sglang(cli, root, suite, "--partitions", "3")
    est = model["est"][suite]
    assert est["group:mamba"] == 600 + 400 - 10  # sum minus one import per extra member
    units = [
        ci.CIRegistry(
            backend=ci.HWBackend.CUDA,
            filename=key if key.startswith("group:") else os.path.join(str(root), key),
            est_time=seconds,
        )
        for key, seconds in est.items()
    ]
    live = {unit.filename: unit.est_time for unit in units}
    members = {
        "group:mamba": [
            "test/registered/kl/test_mamba_spec.py",
            "test/registered/kl/test_mamba_track.py",
        ]
    }
    theirs = [
        [
            file
            for unit in ci.auto_partition(units, i, 3, live)
            for file in members.get(unit.filename, [os.path.relpath(unit.filename, root)])
        ]
        for i in range(3)
    ]
    assert theirs == output[suite]["files"]


def test_the_model_file_keeps_other_suites_and_refuses_a_foreign_file(cli, make_repo):
    root = make_repo("sglang-partition")
    model = root / "model.json"
    model.write_text('{"est": {"other-suite": {"a.py": 5.0}}, "version": 3}')
    _, written = shard_sglang(cli, root, SUITE, "--partitions", "2")
    assert written["est"]["other-suite"] == {"a.py": 5.0}
    assert written["version"] == 3
    assert len(written["est"][SUITE]) == 11
    model.write_text("[1, 2]")
    result = cli(
        [
            "shard",
            "--root",
            str(root),
            "--suite",
            SUITE,
            "--partitions",
            "2",
            "--format",
            "sglang",
            "--partition-model-file",
            str(model),
        ]
    )
    assert result.returncode == 2
    assert "not a partition model file" in result.stderr


def test_a_model_file_needs_the_sglang_format(cli, make_repo):
    root = make_repo("sglang-partition")
    result = cli(
        [
            "shard",
            "--root",
            str(root),
            "--suite",
            SUITE,
            "--partitions",
            "2",
            "--partition-model-file",
            str(root / "m.json"),
        ]
    )
    assert result.returncode == 2
    assert "--partition-model-file goes with --format sglang" in result.stderr

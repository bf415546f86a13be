"""`kl-bitexact shard` end to end, and measured durations overriding est_time."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.registry import durations
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

SUITE = "extra-b-test-4-gpu-b200"
HICACHE = "test/registered/kl/test_hicache_bitexact.py"
SPEC = "test/registered/kl/test_mamba_spec.py"
TRACK = "test/registered/kl/test_mamba_track.py"


def add_tests(root, est_times):
    for index, est in enumerate(est_times):
        (root / f"test/registered/kl/test_extra_{index:02d}.py").write_text(
            "import unittest\n"
            f'register_cuda_ci(est_time={est}, stage="extra-b", runner_config="4-gpu-b200")\n'
            'if __name__ == "__main__":\n    unittest.main()\n'
        )


def shard(cli, root, *args):
    result = cli(["shard", "--root", str(root), "--suite", SUITE, *args])
    assert "Traceback" not in result.stderr
    return result


def results_file(path, tests, suite=SUITE, launch_s=None):
    document = r.Results(
        suites=(
            r.SuiteResult(
                name=suite,
                server=r.ServerInfo(engine="sglang", launch_s=launch_s),
                tests=tuple(
                    r.TestResult(id=id_, check="match", status=r.Status(status), duration_s=s)
                    for id_, status, s in tests
                ),
            ),
        )
    )
    results_io.write_atomic(document, path)
    return path


def test_matrix_keeps_groups_and_lists_every_file_once(cli, make_repo):
    root = make_repo()
    add_tests(root, [900, 300, 300, 200, 100, 60])
    result = shard(cli, root, "--partitions", "3")
    assert result.returncode == 0, result.stderr
    matrix = json.loads(result.stdout)
    assert [entry["partition"] for entry in matrix["include"]] == [0, 1, 2]
    files = [file for entry in matrix["include"] for file in entry["files"]]
    assert sorted(files) == sorted({*files}) and len(files) == 9
    holding = [i for i, entry in enumerate(matrix["include"]) if SPEC in entry["files"]]
    assert TRACK in matrix["include"][holding[0]]["files"]
    # 1700 + 900 + 1000 (group) + 960 = 4560: 1700 is the floor and is reached.
    assert "longest shard 1700 s (lower bound 1700 s)" in result.stderr


@pytest.mark.parametrize("option", ["--timeout", "--shard-timeout"])  # the action's name too
def test_timeout_chooses_the_number_of_shards(cli, make_repo, option):
    root = make_repo()
    add_tests(root, [900, 300, 300, 200, 100, 60])
    result = shard(cli, root, option, "30")
    matrix = json.loads(result.stdout)
    assert len(matrix["include"]) == 3
    assert "3 shard(s) needed to finish within 30 min" in result.stderr


def test_a_file_longer_than_the_timeout_is_exit_2(cli, make_repo):
    result = shard(cli, make_repo(), "--timeout", "20")
    assert result.returncode == 2
    assert "test_hicache_bitexact.py alone takes 1700 s" in result.stderr


def test_more_partitions_than_files_are_capped(cli, make_repo):
    result = shard(cli, make_repo(), "--partitions", "5")
    assert len(json.loads(result.stdout)["include"]) == 2
    assert "only 2 unit(s)" in result.stderr


def test_measured_durations_override_est_time(cli, make_repo, tmp_path):
    root = make_repo()
    add_tests(root, [500])
    extra = "test/registered/kl/test_extra_00.py"
    # Measured: the HiCache file is fast now, the extra one slow.
    measured = results_file(
        tmp_path / "results.json",
        [
            (f"{HICACHE}::TestHiCache::test_multiturn", "passed", 100.0),
            (f"{extra}::T::t", "failed", 3000.0),
        ],
    )
    result = shard(cli, root, "--partitions", "2", "--durations", str(measured))
    matrix = json.loads(result.stdout)
    assert matrix["include"][0]["files"] == [extra]
    assert "longest shard 3000 s" in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--suite", "extra-b-test-4-gpu-b20", "--partitions", "2"],
            "did you mean 'extra-b-test-4-gpu-b200'",
        ),
        (["--suite", SUITE], "give --partitions N, or --timeout MIN"),
        (["--suite", SUITE, "--partitions", "0"], "must be at least 1"),
    ],
)
def test_bad_requests_are_exit_2(cli, make_repo, args, needle):
    result = cli(["shard", "--root", str(make_repo()), *args])
    assert result.returncode == 2
    assert needle in result.stderr


def test_unreadable_durations_file_is_exit_2(cli, make_repo, tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text("{")
    result = shard(cli, make_repo(), "--partitions", "2", "--durations", str(bad))
    assert result.returncode == 2
    assert "results.json: invalid JSON" in result.stderr


def test_duration_mapping_rules(tmp_path):
    registrations = [
        Registration("t/a.py", 1, "cuda", "s", 10.0),
        Registration("t/b.py", 1, "cuda", "s", 10.0),
        Registration("suites/x.yaml", 1, SUITE_FILE_BACKEND, "bitexact-x", 10.0),
    ]
    run1 = results_io.load(
        results_file(
            tmp_path / "1.json",
            [
                ("t/a.py::T::one", "passed", 5.0),
                ("./a.py::T::two", "error", 7.0),
                ("t/b.py::T", "skipped", 99.0),
            ],
            suite="s",
        )
    )
    run2 = results_io.load(
        results_file(tmp_path / "2.json", [("t/a.py::T::one", "passed", 20.0)], suite="s")
    )
    run3 = results_io.load(
        results_file(tmp_path / "3.json", [("t/a.py::T::one", "passed", 30.0)], suite="s")
    )
    suite_run = results_io.load(
        results_file(
            tmp_path / "4.json",
            [("bitexact-x::match", "passed", 40.0), ("bitexact-x::decode", "not_run", 1.0)],
            suite="bitexact-x",
            launch_s=60.0,
        )
    )
    measured = durations.measured([run1, run2, run3, suite_run], registrations)
    # a.py: 12 (one run, two tests), 20, 30 -> median 20; b.py only skipped: not measured;
    # the suite file: its ran test plus the server launch.
    assert measured == {"t/a.py": 20.0, "suites/x.yaml": 100.0}

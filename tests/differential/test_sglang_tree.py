"""sglang's files with the helpers of their own tree (issue 38), through `kl-bitexact pytest`.

tests/fixtures/sglang_tree/ is a checkout of ours in sglang's layout: a kit the 0.5.23 wheel
does not have, a test file importing it, `sglang.srt.utils` and torch (absent here), and
server flags the reference engine has, may drop, and lacks. Before: the wheel's helpers were
served whatever the tree, so the file did not import; a flag the engine lacks was dropped
and the test ran (and went red) on a path the engine does not have.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import sglang_tree
import sglang_wheel

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

TREE = Path(__file__).parents[1] / "fixtures" / "sglang_tree"
FILE = "test/registered/test_tree_helpers_kl.py"


def test_a_tree_runs_with_its_own_helpers_and_what_the_engine_lacks_is_not_judged(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TREE, tree)
    env = {**sglang_wheel.child_env(tmp_path), sglang_tree.TREE_ENV: str(tree)}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(out)]
    command += ["--", "-p", "sglang_tree", FILE]
    done = subprocess.run(
        command, cwd=tree, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    tests = {t.id.rpartition("::")[0].rpartition("::")[2]: t for _, t in _load(out)}
    assert set(tests) == {"TestTreeKit", "TestNeedsAFlag", "TestNeedsTheGpu"}, done.stdout
    assert tests["TestTreeKit"].status is Status.PASSED, done.stdout[-3000:]
    flag, gpu = tests["TestNeedsAFlag"], tests["TestNeedsTheGpu"]
    assert (flag.status, gpu.status) == (Status.SKIPPED, Status.SKIPPED)
    assert flag.message.endswith(
        "not judged on the reference engine: needs --enable-int8-mamba-checkpoint"
    )
    assert gpu.message.endswith(
        "not judged on the reference engine: needs sglang.srt.utils.get_device_capability"
    )


def _load(out: Path) -> list:
    return list(results_io.load(out / "results.json").all_tests())


def test_flags_the_engine_lacks_are_named_and_flags_of_no_meaning_here_are_dropped() -> None:
    launch = "--tp-size 4 --page-size 64 --mamba-scheduler-strategy extra_buffer"
    launch += (
        " --speculative-eagle-topk 1 --speculative-eagle-topk 4 --hicache-storage-backend file"
    )
    kept, dropped = sglang_wheel.reference_args(
        [*launch.split(), "--enable-int8-mamba-checkpoint", "--mem-fraction-static=0.7"]
    )
    assert kept == ["--page-size", "64"]
    assert sglang_wheel.needed(dropped) == [
        "--mamba-scheduler-strategy extra_buffer",
        "--speculative-eagle-topk 4",
        "--hicache-storage-backend file",
        "--enable-int8-mamba-checkpoint",
    ]


def test_the_launcher_overlaps_as_sglang_does_unless_the_file_disables_it() -> None:
    assert "--overlap-schedule" in sglang_wheel.served_defaults(["--page-size", "64"])
    assert "--overlap-schedule" not in sglang_wheel.served_defaults(
        ["--page-size", "64", sglang_wheel.DISABLE_OVERLAP]
    )
    _, dropped = sglang_wheel.reference_args([sglang_wheel.DISABLE_OVERLAP])
    assert sglang_wheel.needed(dropped) == []


def test_only_the_checkouts_own_imports_get_stand_ins(tmp_path: Path) -> None:
    """An installed library's optional import (tqdm's `try: import ...`) stays missing, as
    on a runner: a stand-in there turned a whole file into 'needs envwrap.envwrap'."""
    finder = sglang_tree._AbsentLibraries(tmp_path)
    assert finder.find_spec("no_such_library_here") is None  # this file is not the checkout's
    code = compile(
        "spec = finder.find_spec('no_such_library_here')", str(tmp_path / "f.py"), "exec"
    )
    scope = {"finder": finder}
    exec(code, scope)
    assert scope["spec"] is not None


def test_a_decorator_of_the_engine_lets_the_file_import_and_its_use_skips() -> None:
    """`@triton.jit` at import skipped sglang's jitter files whole, their tests uncollected."""
    import unittest

    import pytest

    def kernel() -> None: ...

    decorated = sglang_tree.Needed("triton.jit")(kernel)
    with pytest.raises(unittest.SkipTest, match=r"needs triton\.jit\(kernel\)\[\.\.\.\]"):
        decorated[(1,)]()
    with pytest.raises(unittest.SkipTest, match=r"needs torch\.cuda\.is_available"):
        sglang_tree.Needed("torch.cuda.is_available")()

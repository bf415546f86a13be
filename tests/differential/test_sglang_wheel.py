"""The oracle itself: sglang's files come from the pinned wheel and import with our shims."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import sglang_wheel


def test_the_five_files_come_from_the_pinned_wheel_in_the_cache(
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    root = sglang_wheel.source_root()
    assert root == sglang_wheel.cache_dir() / "src"
    assert sglang_wheel.SGLANG_VERSION in str(root)
    for name in ("kl_test_utils", "kl_multiturn_utils", "kits.kl_divergence_kit"):
        module = sglang_oracle(name)
        assert module.__file__ is not None and module.__file__.startswith(str(root))
    kit = sglang_oracle("kits.kl_divergence_kit")
    assert kit.KLDivergenceMixin.kl_div_max_samples == 32


def test_the_shims_look_like_plain_modules_to_tools_that_walk_sys_modules(
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    # hypothesis reads `__file__` of every loaded module; a stub answering every attribute
    # broke each property test that ran after this folder (seen in CI).
    sglang_oracle("test_utils")
    for name, module in list(sys.modules.items()):
        if name == "sglang" or name.startswith("sglang."):
            assert isinstance(getattr(module, "__file__", None), (str, type(None))), name
    test_utils = sys.modules["sglang.test.test_utils"]
    with pytest.raises(AttributeError):
        _ = test_utils.torch.__file__  # a third-party stub kept by test_utils, still a plain object


def test_test_utils_launches_the_reference_engine_and_helpers_talk_to_it(
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    test_utils = sglang_oracle("test_utils")
    kl = sglang_oracle("kl_test_utils")
    # Port 0 is no URL a client can use: take a free one the way sglang's tests pick theirs.
    port = test_utils.find_available_port(31000)
    url = f"http://127.0.0.1:{port}"
    process = test_utils.popen_launch_server(
        "kl-bitexact-reference",
        url,
        timeout=60,
        other_args=["--tp", "4", "--page-size", "16", "--mem-fraction-static", "0.8"],
    )
    try:
        kl._flush_cache(url)
        result = kl._generate(url, [[1, 2, 3, 4]], 3, return_logprob=True)
        assert len(result[0]["output_ids"]) == 3
        assert len(kl._extract_output_logprobs(result[0])) == 3
    finally:
        test_utils.kill_process_tree(process.pid)
    assert process.poll() is not None


def test_a_failed_download_is_an_error_naming_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KL_BITEXACT_CACHE", str(tmp_path))
    with pytest.raises(sglang_wheel.SglangWheelError, match=r"sglang==0\.0\.0a0"):
        sglang_wheel.source_root("0.0.0a0")


def test_sglang_launch_flags_map_to_serve_reference_flags() -> None:
    launch = "--tp 4 --trust-remote-code --page-size=32 --speculative-algorithm NEXTN"
    kept, dropped = sglang_wheel.reference_args([*launch.split(), "--mem-fraction-static", "0.8"])
    assert kept == ["--page-size", "32", "--speculative-algorithm", "EAGLE"]
    assert dropped == ["--tp", "4", "--trust-remote-code", "--mem-fraction-static", "0.8"]

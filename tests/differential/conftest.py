"""Fixtures of the differential tests: sglang's kl_test_utils over our prompts, seed pinned,
and reference servers started once per module."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import process_groups
import pytest
from sglang_differential import (
    BOUNDARY_MODEL,
    LISTENING,
    MODEL,
    SERVERS,
    SeededRequests,
    longbench_file,
    longbench_prompts,
)


@pytest.fixture(scope="module")
def prompt_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        for model in (MODEL, BOUNDARY_MODEL):
            Path(directory, longbench_file(model)).write_text(json.dumps(longbench_prompts(model)))
        yield Path(directory)


@pytest.fixture(scope="module")
def kl_utils(sglang_oracle: Callable[[str], ModuleType], prompt_dir: Path) -> Iterator[ModuleType]:
    """sglang's kl_test_utils reading its LongBench cache from `prompt_dir`, seed pinned."""
    module: Any = sglang_oracle("kl_test_utils")  # its globals are swapped below
    saved = module.CACHE_DIR, module.requests
    module.CACHE_DIR = str(prompt_dir)
    module.requests = SeededRequests(saved[1])
    module._cached_input_ids.clear()
    yield module
    module.CACHE_DIR, module.requests = saved
    module._cached_input_ids.clear()


@pytest.fixture(scope="module")
def servers() -> Iterator[Callable[[str], str]]:
    """Reference servers by name (SERVERS), each started once for the module."""
    started: dict[str, tuple[subprocess.Popen[str], str]] = {}

    def url(name: str) -> str:
        if name not in started:
            command = [sys.executable, "-m", "kl_bitexact", "serve-reference", "--port", "0"]
            process = process_groups.start(
                [*command, *SERVERS[name]],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith(LISTENING), f"{name}: {line!r}"
            started[name] = (process, line[len(LISTENING) :].strip())
        return started[name][1]

    yield url
    for process, _ in started.values():
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        process_groups.kill_group(process.pid)
        assert process.stdout is not None
        process.stdout.close()

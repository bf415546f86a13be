"""Suites for `kl-bitexact run` against the fake sglang server (fake_sglang_server.py),
their results read back, and a runner reporter that prints nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kl_bitexact.results import io as results_io

FAKE = Path(__file__).parent / "fake_sglang_server.py"
TEST = (
    "{name: %s, check: %s, samples: 3, prompt_tokens: [12, 20], max_new_tokens: 8, vocab_size: 500}"
)


def suite_yaml(
    name: str,
    *fake_args: str,
    timeout: str = "",
    tests: tuple[str, ...] = ("match", "decode_cache_hit"),
) -> str:
    command = ", ".join(
        json.dumps(a) for a in [sys.executable, str(FAKE), "--port", "{port}", *fake_args]
    )
    lines = [
        f"- name: {name}",
        "  server:",
        "    engine: sglang",
        f"    command: [{command}]",
        "    startup_timeout: 3",
    ]
    if timeout:
        lines.append(f"    request_timeout: {timeout}")
    lines.append("  tests:")
    lines += [f"    - {TEST % (check, check)}" for check in tests]
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, *suites: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text("".join(suites))
    return path


def statuses(out: Path) -> dict[str, str]:
    loaded = results_io.load(out / "results.json")
    return {test.id: test.status.value for _, test in loaded.all_tests()}


class Silent:
    def suite_started(self, item: object) -> None: ...

    def test_finished(self, result: object) -> None: ...

    def suite_finished(self, result: object) -> None: ...

    def progress(self, line: str) -> None: ...

    def server_failed(self, item: object, error: object) -> None: ...

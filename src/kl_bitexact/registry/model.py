"""The registration value shared by the scanners, the lint and the shard planner."""

from __future__ import annotations

from dataclasses import dataclass

# Backend of registrations that come from kl-bitexact suite files rather than from
# sglang-style register_*_ci calls.
SUITE_FILE_BACKEND = "kl-bitexact"


def suite_name(stage: str, runner_config: str) -> str:
    """sglang's effective suite name for a (stage, runner_config) pair."""
    return f"{stage}-test-{runner_config}"


@dataclass(frozen=True)
class Registration:
    """One file registered to one suite (a file may register several)."""

    file: str  # repository-relative, POSIX separators
    line: int
    backend: str  # cpu, cuda, amd, npu, xpu, musa, mlx, or SUITE_FILE_BACKEND
    suite: str
    est_time: float  # seconds; 0.0 when missing or invalid (reported by the lint)
    nightly: bool = False
    disabled: str | None = None
    in_process_group: str | None = None
    stage: str | None = None
    runner_config: str | None = None

    @property
    def enabled(self) -> bool:
        return self.disabled is None

"""The prefill graph runner: a code path only a configuration reaches (issue 35, item 5).

sglang's `PrefillCudaGraphRunner` is built at startup only when the prefill graph survives
resolution; an EAGLE target never builds it, so `TestUnifiedHybridMTPBitExact`, which
guards the runner's `_is_mamba_track_enabled()`, was green for weeks without running it
(PR 35293 moved the test to DSPARK). This is its analogue: with
`--cuda-graph-backend-prefill breakable` (or `full`) and no EAGLE, every prefill goes
through `PrefillGraphRunner.run`, which computes what the eager prefill computes (a graph
replays the same kernels) and decides itself whether to keep the recurrent state at track
boundaries. /server_info reports the resolved `cuda_graph_config.prefill.backend`, so a
suite can state it (`expect`) and a reach probe can name `PrefillGraphRunner.run`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kl_bitexact.reference.checkpoints import CheckpointPolicy
from kl_bitexact.reference.config import EngineConfig

if TYPE_CHECKING:
    from kl_bitexact.reference.engine import ReferenceEngine
    from kl_bitexact.reference.run import Run


class PrefillGraphRunner:
    """Built once per server, only where the resolved prefill graph backend is not off."""

    def __init__(self, config: EngineConfig) -> None:
        self.backend = config.prefill_graph_backend
        self.disable_radix_cache = config.disable_radix_cache
        self.mamba_track_enabled = self._is_mamba_track_enabled()
        self.track_policy = CheckpointPolicy.track(config.mamba_track_interval, config.faults)
        self.batches = 0  # prefills replayed through the runner (what a probe would count)

    def _is_mamba_track_enabled(self) -> bool:
        # sglang: the extra mamba buffer and a radix cache to keep the tracked state in.
        return not self.disable_radix_cache

    def run(self, engine: ReferenceEngine, runs: list[Run]) -> None:
        """One batch's prefill through the graph path: the engine's own arithmetic, with the
        runner's decision on track checkpoints."""
        self.batches += 1
        engine.prefill_with(runs, self.policy())

    def policy(self) -> CheckpointPolicy | None:
        """The track checkpoints this runner keeps: none where mamba tracking is off."""
        return self.track_policy if self.mamba_track_enabled else None

    @staticmethod
    def built_for(config: EngineConfig) -> PrefillGraphRunner | None:
        if config.prefill_graph_backend == "disabled":
            return None
        return PrefillGraphRunner(config)

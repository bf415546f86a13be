"""The embedded reference engine: a small numpy hybrid model behind a radix prefix cache,
served over sglang's native HTTP protocol, with switchable state-layer faults.

Modules, one idea each: `config` (settings and faults), `numerics` (deterministic vs BLAS
arithmetic), `model` (weights and the forward pass), `sequence` (one request's KV and
recurrent state), `radix_cache` (prefix tree, geometry, eviction), `hicache` (host tier),
`sampling`, `speculative`, `protocol` (request validation, response shapes), `engine`
(ties them together) and `http` (the server).
"""

from __future__ import annotations

import os

# The engine's matrices are tiny: BLAS worker threads only contend for shared cores (a 10x
# slowdown measured on 2 busy cores). This must run before numpy loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

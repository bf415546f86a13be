"""Where sglang's KL helpers cache their LongBench prompts, so a suite can reuse them.

sglang's `kl_test_utils.get_input_ids(tokenizer_path, max_prompt_tokens=3000, num_samples=48)`
tokenizes LongBench-v2 once and keeps the token ids in
`${XDG_CACHE_HOME:-~/.cache}/sglang/longbench/input_ids_<model>_<tokens>_<n>.json` (the model
path with `/` and `\\` as `_`): a JSON list of token-id lists, the format of a suite's
`prompts` file. Its tests then take the first `max_samples`, as a check takes `samples`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# sglang's DEFAULT_PROMPT_TOKENS and DEFAULT_NUM_SAMPLES (kl_test_utils, 0.5.23).
DEFAULT_PROMPT_TOKENS = 3000
DEFAULT_NUM_SAMPLES = 48


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "sglang" / "longbench"


def cache_file(
    model: str,
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    environ: Mapping[str, str] = os.environ,
) -> Path:
    safe = model.replace("/", "_").replace("\\", "_")
    return cache_dir(environ) / f"input_ids_{safe}_{prompt_tokens}_{num_samples}.json"

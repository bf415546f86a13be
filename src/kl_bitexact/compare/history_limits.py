"""How much history there is: runs by default and at most, and how long a fetch may take.

Apart from `history.py` so that a command line can state them in its `--help` without
importing the history, the gate and the results model (`report --help`: issue 40).
"""

from __future__ import annotations

# The runs of the base branch the history covers by default, and at most: each is one
# artifact to download once, and a trend of more than 100 runs is no longer compact.
DEFAULT_RUNS = 20
MAX_RUNS = 100
# How long fetching a history may take (it downloads one artifact per run not cached):
# past it, the history is the runs fetched so far, and says so.
FETCH_SECONDS = 300.0

"""Which modules a fresh interpreter has loaded after running a snippet (a real process,
so nothing this test session imported counts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Modules kl-bitexact depends on that cost tens of milliseconds or more to import; start-up
# paths must not load them before a command or fixture needs them.
HEAVY = (
    "numpy",
    "requests",
    "urllib3",
    "github",
    "jsonschema",
    "openapi_core",
    "yaml",
    "ruamel",
    "defusedxml",
    "msgspec",
)

_REPORT = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"


def modules_after(code: str) -> set[str]:
    """The top-level and dotted names in sys.modules after `code` runs in a new python."""
    done = subprocess.run(
        [sys.executable, "-c", code + _REPORT],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        check=False,
    )
    last_line = done.stderr.strip().splitlines()[-1]
    loaded: list[str] = json.loads(last_line)
    return set(loaded)


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if name.split(".")[0] in HEAVY)

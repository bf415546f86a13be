"""One launch's probe: the directory the server's processes write to, the functions they
watch, the environment that loads them, and the test boundaries (the `epoch` page).

The epoch is 8 bytes the probes map read-only; this side rewrites them in place (never a
new file: the mappings would keep the old one) before each test, so a hit is attributed
to the test that was running when the function was called, at the cost of a memory read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kl_bitexact.reach import hits
from kl_bitexact.results.model import Reach

PROBE_DIR = Path(__file__).resolve().parent / "probe"
REACH_DIR_VARIABLE = "KL_BITEXACT_REACH_DIR"  # read by probe/sitecustomize.py
EPOCH_BYTES = 8

NOT_LAUNCHED = (
    "reach not measured: kl-bitexact did not launch this server (base_url, --base-url), so "
    "no probe ran in it; launch it from the suite's server.command to measure reach"
)


def session_environment(parent: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`kl-bitexact pytest`: a probe directory for the session, its names written by the
    plugin once it has collected the tests (`reach` markers) and its test boundaries marked
    by the plugin too; `env` with it loaded first, for pytest and every server it starts."""
    parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="pytest-", dir=parent))
    (directory / "epoch").write_bytes(bytes(EPOCH_BYTES))
    return loading(env, directory)


def loading(env: Mapping[str, str], directory: Path) -> dict[str, str]:
    """`env` with the probe of `directory` loaded first: its directory first on PYTHONPATH."""
    path = env.get("PYTHONPATH", "")
    joined = os.pathsep.join(p for p in (str(PROBE_DIR), path) if p)
    return {**env, "PYTHONPATH": joined, REACH_DIR_VARIABLE: str(directory)}


class Probe:
    """The probe of one launched server (its directory under the run's logs)."""

    def __init__(
        self, parent: Path, stem: str, names: tuple[str, ...], lines: tuple[Path, ...] = ()
    ) -> None:
        """`lines`: files whose executed lines coverage.py records (the PR's changed files)."""
        parent.mkdir(parents=True, exist_ok=True)
        self.directory = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=parent))
        self.names = names
        (self.directory / "names").write_text("".join(f"{name}\n" for name in names))
        if lines:
            (self.directory / "lines").write_text("".join(f"{path}\n" for path in lines))
        epoch = self.directory / "epoch"
        epoch.write_bytes(bytes(EPOCH_BYTES))
        self._epoch_fd = os.open(epoch, os.O_RDWR | os.O_CLOEXEC)
        self._reader = hits.Reader(self.directory, frozenset(names))
        self._number = hits.STARTUP

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with this probe loaded first."""
        return loading(env, self.directory)

    def begin(self) -> int:
        """The next test starts now: its number, which the probes' hits will carry."""
        self._number += 1
        os.pwrite(self._epoch_fd, self._number.to_bytes(EPOCH_BYTES, "little"), 0)
        return self._number

    def reach(self, number: int, names: tuple[str, ...]) -> Reach:
        """What test `number` reached of `names`, as the probes have written it so far."""
        return hits.reach_of(self._reader.read(), (number,), names)

    def close(self) -> None:
        if self._epoch_fd >= 0:
            os.close(self._epoch_fd)
            self._epoch_fd = -1

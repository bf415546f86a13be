"""Reach under `kl-bitexact pytest`: tests name the functions they exist to exercise with
`@pytest.mark.reach("module:qualname", ...)` (on a test, its class or its module), and each
test's JUnit properties say which ran (docs/reach.md).

`kl-bitexact pytest` starts pytest with the probe loaded and its directory named in
KL_BITEXACT_REACH_DIR (reach/probe_dir.session_environment); the servers a test starts
inherit both. This plugin writes the names once the tests are collected (before any server
starts), marks each test's setup and call as its own epochs, and after the test reads what
the probes wrote. A class's first setup (where unittest's setUpClass launches the server)
counts as its server starting for every test of the class.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from kl_bitexact.ingest import properties as prop
from kl_bitexact.reach import hits
from kl_bitexact.reach.probe_dir import EPOCH_BYTES, REACH_DIR_VARIABLE
from kl_bitexact.suite.model import FUNCTION_EXAMPLE, is_function_name

MARKER = "reach"
_NAMES = pytest.StashKey[tuple[str, ...]]()
_EPOCHS = pytest.StashKey[list[int]]()


def names_of(item: pytest.Item) -> tuple[str, ...]:
    """The functions an item names: its module's, its class's, then its own, once each."""
    found: list[str] = []
    for marker in reversed(list(item.iter_markers(MARKER))):
        for name in marker.args:
            if not isinstance(name, str) or not is_function_name(name):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.reach({name!r}): name a function as "
                    f"`module:qualname`, e.g. {FUNCTION_EXAMPLE!r}"
                )
            found.append(name)
    return tuple(dict.fromkeys(found))


class Tracker:
    """The session's probe directory, seen from inside pytest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.epoch = hits.STARTUP
        self.first_setup: dict[str, int] = {}  # class or module node id -> its first setup
        self.reader: hits.Reader | None = None
        self._fd = os.open(directory / "epoch", os.O_RDWR | os.O_CLOEXEC)

    def collected(self, items: list[pytest.Item]) -> None:
        everything: dict[str, None] = {}
        for item in items:
            named = names_of(item)
            item.stash[_NAMES] = named
            everything.update(dict.fromkeys(named))
        if everything:  # none named: the probes stay idle in every process
            (self.directory / "names").write_text("".join(f"{n}\n" for n in everything))
            self.reader = hits.Reader(self.directory, frozenset(everything))

    def begin(self, item: pytest.Item, phase: str) -> None:
        """A new epoch for the item's `setup` or `call`."""
        self.epoch += 1
        os.pwrite(self._fd, self.epoch.to_bytes(EPOCH_BYTES, "little"), 0)
        item.stash.setdefault(_EPOCHS, []).append(self.epoch)
        if phase == "setup":
            self.first_setup.setdefault(_owner(item), self.epoch)

    def record(self, item: pytest.Item) -> None:
        """The item's reach, as a JUnit property (kl-bitexact pytest reads it)."""
        names = item.stash.get(_NAMES, ())
        if not names or self.reader is None:
            return
        epochs = item.stash.get(_EPOCHS, [])
        startup = (hits.STARTUP, self.first_setup.get(_owner(item), hits.STARTUP))
        reach = hits.reach_of(self.reader.read(), epochs, names, startup)
        item.user_properties.append((prop.REACH, msgspec.json.encode(reach).decode()))


def _owner(item: pytest.Item) -> str:
    """Where a server shared by several tests is started: the class, else the module."""
    parent = item.parent
    return parent.nodeid if parent is not None else item.nodeid


def tracker() -> Tracker | None:
    """The session's tracker when `kl-bitexact pytest` loaded the probe; else None."""
    directory = os.environ.get(REACH_DIR_VARIABLE)
    if not directory or not (Path(directory) / "epoch").is_file():
        return None
    return Tracker(Path(directory))

"""A checkout of sglang's own test helpers against the reference engine, on a CPU.

On a real runner `pip install -e python` makes `import sglang.test...` the checkout's own
files, and `kl-bitexact pytest` runs the checkout's test files with them. Here (no GPU, no
torch) the same files are served by a meta-path finder instead, so sglang's test files of any
date run with the helpers of their own tree (`unified_radix_cache_kit`, a newer
`kl_multiturn_utils`, ...), never with the 0.5.23 wheel's (that stays the differential oracle,
sglang_wheel.py):

- `sglang.test.*` and `sglang.benchmark.*`: the checkout's files (`python/sglang/...`),
  adapted as sglang_wheel adapts the wheel's (popen_launch_server starts the reference engine;
  the LongBench prompt cache is ours);
- what sglang_wheel shims (the tokenizer, `kill_process_tree`, env flags, evaluations that need
  a real model): the same shims;
- any other `sglang.*` module (the engine itself: `sglang.srt.*`) and any library the tree
  imports that is not installed (torch, triton, ...): a stand-in whose names import, and
  whose use skips the test as "not judged on the reference engine: needs NAME" - a path the
  reference engine does not have is never red, nor green.

    kl-bitexact pytest -- -p sglang_tree test/registered/radix_cache/test_x.py

The checkout: $KL_BITEXACT_SGLANG_TREE, else the first directory at or above the working
directory holding `python/sglang/test/`.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import unittest
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sglang_wheel

TREE_ENV = "KL_BITEXACT_SGLANG_TREE"
# What the checkout serves itself; everything else of sglang is the engine.
SERVED = ("sglang.test", "sglang.benchmark")


class TreeNotFound(RuntimeError):
    """No sglang checkout where one was looked for; the message says where."""


def checkout(start: Path | None = None) -> Path:
    """The sglang checkout whose helpers are served."""
    given = os.environ.get(TREE_ENV)
    if given:
        if not (Path(given) / "python" / "sglang" / "test").is_dir():
            raise TreeNotFound(f"${TREE_ENV}={given} has no python/sglang/test/")
        return Path(given).resolve()
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "python" / "sglang" / "test").is_dir():
            return directory
    raise TreeNotFound(f"no python/sglang/test/ at or above {here}; set ${TREE_ENV}")


class Needed(sglang_wheel._Unavailable):
    """A name of the engine (or of a library absent here) that a test file imported: using
    it skips the test, naming it."""

    def __getattr__(self, attribute: str) -> Any:
        return _needed_attribute(self._name, attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            # A decorator applied at import (`@triton.jit`): the file still imports and its
            # tests are collected; using what it decorated skips them.
            return Needed(f"{self._name}({getattr(args[0], '__name__', 'function')})")
        raise unittest.SkipTest(f"{sglang_wheel.NOT_JUDGED}: needs {self._name}")

    def __getitem__(self, key: Any) -> Any:
        return Needed(f"{self._name}[...]")

    def __iter__(self) -> Any:
        raise unittest.SkipTest(f"{sglang_wheel.NOT_JUDGED}: needs {self._name}")

    def __bool__(self) -> bool:
        raise unittest.SkipTest(f"{sglang_wheel.NOT_JUDGED}: needs {self._name}")


def _needed_attribute(owner: str, key: str) -> Needed:
    # Dunders stay missing: tools that walk sys.modules must see a plain module.
    if key.startswith("__") and key.endswith("__"):
        raise AttributeError(f"{owner} has no {key}")
    return Needed(f"{owner}.{key}")


def _needed_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__getattr__ = functools.partial(_needed_attribute, name)  # type: ignore[method-assign]
    module.__path__ = []  # a package: `import name.sub` finds the next stand-in
    return module


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _needed_module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _TreeFinder(sglang_wheel._Finder):
    """`sglang.*`: shims first, the checkout's own test helpers, stand-ins for the engine."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        for module in self.shims.values():
            # A name the shims do not define is the engine's: using it skips the test.
            module.__getattr__ = functools.partial(_needed_attribute, module.__name__)  # type: ignore[method-assign]

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "sglang" and not fullname.startswith("sglang."):
            return None
        served = fullname == "sglang" or fullname.startswith(tuple(f"{s}" for s in SERVED))
        if fullname in self.shims or served:
            spec = super().find_spec(fullname, path, target)
            if spec is not None and isinstance(spec.loader, sglang_wheel._WheelSourceLoader):
                spec.loader = _TreeSourceLoader(fullname, str(spec.origin))
            return spec
        return importlib.util.spec_from_loader(fullname, _StandInLoader(), is_package=True)


class _TreeSourceLoader(importlib.machinery.SourceFileLoader):
    """A checkout's file, adapted as the wheel's are; the libraries it imports that are not
    installed come from _AbsentLibraries (stand-ins that skip), not from the wheel's stubs
    (which raise)."""

    def exec_module(self, module: types.ModuleType) -> None:
        super().exec_module(module)
        adapt = sglang_wheel._ADAPTERS.get(module.__name__)
        if adapt is not None:
            adapt(module)


class _AbsentLibraries(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: a library nothing installed provides (torch, triton, ...),
    imported from a file of the checkout, is a stand-in; elsewhere it stays missing."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self._from_checkout():
            return None
        return importlib.util.spec_from_loader(fullname, _StandInLoader(), is_package=True)

    def _from_checkout(self) -> bool:
        """Whether the statement importing it is in a file of the checkout (the first frame
        outside the import machinery): an installed library's own optional imports
        (`try: import x`) stay missing, as they would on a runner."""
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None and _in_import_machinery(frame.f_code.co_filename):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(self.root)


def _in_import_machinery(filename: str) -> bool:
    return filename.startswith("<frozen importlib") or filename in (__file__, importlib.__file__)


@functools.cache
def install(root: Path) -> Path:
    """Make `import sglang...` the checkout's helpers and the stand-ins; idempotent."""
    if "sglang" in sys.modules:
        raise sglang_wheel.SglangWheelError("a different `sglang` is already imported")
    sys.meta_path.insert(0, _TreeFinder(root / "python"))
    sys.meta_path.append(_AbsentLibraries(root))
    # sglang's kits read env flags through `envs`; the wheel's shim answers every one.
    return root


def pytest_configure(config: Any) -> None:
    """As a pytest plugin (`-p sglang_tree`)."""
    install(checkout(Path(str(config.invocation_params.dir))))

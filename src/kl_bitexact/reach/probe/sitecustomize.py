"""The reach probe: runs inside a server kl-bitexact launched, and in every Python process
that server starts (sglang's scheduler and detokenizer, spawned by multiprocessing).

Python imports `sitecustomize` at startup from the first directory of `sys.path` that holds
one; kl-bitexact puts this file's directory first on the server's PYTHONPATH, the way
`opentelemetry-instrument` and `ddtrace-run` instrument a program they start. Children
inherit the environment, so a spawned interpreter loads the probe too; a forked one
inherits it already loaded.

What it does, only when `KL_BITEXACT_REACH_DIR` names a directory: reads the functions to
watch from that directory's `names` (`module:qualname`, one a line) and, when each module
is imported, wraps those functions. A wrapped function, when called, compares the run's
current test (8 bytes of the `epoch` file, mapped read-only, which kl-bitexact rewrites at
each test boundary) with the last one it saw, and only when they differ appends one line to
this process's `hits-<pid>.log`. So a call costs a slice of a mapped page and a compare;
functions not named cost nothing.

This file is the whole probe: it imports the standard library only (never kl_bitexact,
which the server's Python may not have), runs on Python 3.8 and later, and never lets a
failure of its own reach the server: whatever goes wrong is written to its log as an
`error` line, which kl-bitexact reports.
"""

from __future__ import annotations

import atexit
import functools
import importlib.machinery
import importlib.util
import inspect
import mmap
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

REACH_DIR = "KL_BITEXACT_REACH_DIR"
_EPOCH_BYTES = 8
_MAX_NAMES = 10_000


class _Log:
    """This process's hit log, opened again in a forked child (its own pid, its own file)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pid = -1
        self.fd = -1
        self.lock = threading.Lock()

    def write(self, *fields: str) -> None:
        line = ("\t".join(fields) + "\n").encode("utf-8", "replace")
        with self.lock:
            if self.pid != os.getpid():
                self._open()
            os.write(self.fd, line)  # O_APPEND: whole lines, never interleaved

    def forked(self) -> None:
        """In a forked child: a lock another thread held at the fork stays held forever."""
        self.lock = threading.Lock()

    def _open(self) -> None:
        self.pid = os.getpid()
        path = os.path.join(self.directory, f"hits-{self.pid}.log")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.write_start()

    def write_start(self) -> None:
        version = "{}.{}".format(*sys.version_info[:2])
        argv = " ".join(sys.argv)[:300].replace("\t", " ").replace("\n", " ")
        os.write(self.fd, f"start\t{self.pid}\t{version}\t{argv}\n".encode())


class _Epoch:
    """The current test's number, as kl-bitexact last wrote it (a shared mapped page)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.view = mmap.mmap(fd, _EPOCH_BYTES, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def now(self) -> bytes:
        return self.view[:_EPOCH_BYTES]


def _probe(name: str, original: Callable[..., Any], epoch: _Epoch, log: _Log) -> Callable[..., Any]:
    """`original` wrapped: its first call in each test writes a `hit` line."""
    last = [b""]

    def seen() -> None:
        now = epoch.now()
        if now != last[0]:
            last[0] = now
            log.write("hit", str(int.from_bytes(now, "little")), name)

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def probed_coroutine(*args: Any, **kwargs: Any) -> Any:
            seen()
            return await original(*args, **kwargs)

        return probed_coroutine

    @functools.wraps(original)
    def probed(*args: Any, **kwargs: Any) -> Any:
        seen()
        return original(*args, **kwargs)

    return probed


class _Installer:
    """Wraps the named functions of a module once it has been executed."""

    def __init__(self, names: list[str], epoch: _Epoch, log: _Log, lines: _Lines) -> None:
        self.by_module: dict[str, list[str]] = {}
        for name in names:
            module, _, qualname = name.partition(":")
            self.by_module.setdefault(module, []).append(qualname)
        self.epoch = epoch
        self.log = log
        self.lines = lines

    def install(self, module: ModuleType) -> None:
        for qualname in self.by_module.get(module.__name__, ()):
            name = f"{module.__name__}:{qualname}"
            try:
                why = self._wrap(module, qualname, name)
            except Exception as error:  # the server must keep running whatever happens here
                why = f"cannot wrap it: {type(error).__name__}: {error}"
            if why:
                self.log.write("missing", name, why.replace("\t", " ").replace("\n", " "))
            else:
                self.log.write("installed", name)

    def _wrap(self, module: ModuleType, qualname: str, name: str) -> str:
        """Empty when wrapped; otherwise why not, in words."""
        parts = qualname.split(".")
        owner: Any = module
        for depth, part in enumerate(parts[:-1], start=1):
            owner = getattr(owner, part, None)
            if owner is None:
                return "{} has no {}".format(module.__name__, ".".join(parts[:depth]))
        attribute = parts[-1]
        raw = owner.__dict__.get(attribute) if hasattr(owner, "__dict__") else None
        if raw is None:
            return f"{module.__name__} has no {qualname}"
        kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
        function = raw.__func__ if kind is not None else raw
        if not inspect.isfunction(function):
            return f"{qualname} is a {type(function).__name__}, not a Python function"
        wrapped = _probe(name, function, self.epoch, self.log)
        setattr(owner, attribute, kind(wrapped) if kind is not None else wrapped)
        return ""


class _LoaderAfter:
    """A module's own loader, which hands the executed module to the installer."""

    def __init__(self, loader: Any, installer: _Installer) -> None:
        self._loader = loader
        self._installer = installer

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._installer.lines.before(getattr(module.__spec__, "origin", None))
        self._loader.exec_module(module)
        self._installer.install(module)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._loader, attribute)


class _Finder:
    """First on sys.meta_path: finds a named module with the finders after it, then puts
    `_LoaderAfter` in front of its loader."""

    def __init__(self, installer: _Installer) -> None:
        self.installer = installer

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.installer.by_module:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderAfter(spec.loader, self.installer)
                return spec
        return None


def _names(directory: str) -> list[str]:
    with open(os.path.join(directory, "names"), encoding="utf-8") as names:
        return [line.strip() for line in names.readlines()[:_MAX_NAMES] if ":" in line]


class _Lines:
    """Line data of the changed files (`lines`: their absolute paths), when asked:
    coverage.py restricted to them, started just before the first of them is imported (so
    a process that never imports one, and everything imported before, costs nothing),
    saved at exit (and on SIGTERM) as `coverage.<host>.<pid>.<n>`."""

    def __init__(self, directory: str, log: _Log) -> None:
        self.directory = directory
        self.log = log
        self.files: set[str] = set()
        self.started = False
        listed = os.path.join(directory, "lines")
        if os.path.exists(listed):
            with open(listed, encoding="utf-8") as lines:
                self.files = {line.strip() for line in lines.readlines()[:_MAX_NAMES]}
            self.files.discard("")

    def before(self, origin: Any) -> None:
        """A module from `origin` (a path) is about to run."""
        if self.started or not isinstance(origin, str):
            return
        if os.path.realpath(origin) in self.files:
            self.started = True
            self._start()

    def _start(self) -> None:
        try:
            import coverage
        except ImportError:
            self.log.write(
                "lines", "unavailable", "coverage.py is not installed in the server's Python"
            )
            return
        measure = coverage.Coverage(
            data_file=os.path.join(self.directory, "coverage"),
            data_suffix=True,
            include=sorted(self.files),
            config_file=False,
        )
        measure.set_option("run:sigterm", True)
        if sys.version_info >= (3, 12):  # sys.monitoring: untraced code costs nothing
            measure.set_option("run:core", "sysmon")
        measure.start()
        atexit.register(_save, measure)
        self.log.write("lines", "started")


def _save(measure: Any) -> None:
    measure.stop()
    measure.save()


def _start(directory: str) -> None:
    if not os.path.exists(os.path.join(directory, "names")):
        # `kl-bitexact pytest`: pytest itself starts before its plugin has collected the
        # names the tests give; the servers its tests launch come later and find them.
        return
    log = _Log(directory)
    os.register_at_fork(after_in_child=log.forked)
    try:
        epoch = _Epoch(os.path.join(directory, "epoch"))
        installer = _Installer(_names(directory), epoch, log, _Lines(directory, log))
        for module in list(installer.by_module):
            if module in sys.modules:  # imported before us (a forked child, the stdlib)
                installer.lines.before(getattr(sys.modules[module], "__file__", None))
                installer.install(sys.modules[module])
        sys.meta_path.insert(0, _Finder(installer))
        log.write("ready", str(len(installer.by_module)))
    except Exception as error:
        log.write("error", (f"{type(error).__name__}: {error}").replace("\n", " "))


def _chain() -> None:
    """Run the `sitecustomize` this one shadows, if any (a distribution's or a venv's), as
    ddtrace and coverage do: the server must start as it would have without us."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get(REACH_DIR):
    _start(os.environ[REACH_DIR])
_chain()

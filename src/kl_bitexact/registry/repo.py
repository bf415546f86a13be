"""Read a repository's registrations, allowlists and workflows from disk (the I/O shell)."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import (
    allowlists,
    findings,
    paths,
    scan,
    scancache,
    shell,
    suitefiles,
    suiterunner,
    workflowcache,
    workflows,
    yamlio,
)
from kl_bitexact.registry.allowlists import Allowlist
from kl_bitexact.registry.collection import Root
from kl_bitexact.registry.config import RegistryConfig
from kl_bitexact.registry.model import Registration
from kl_bitexact.registry.scan import ScannedFile
from kl_bitexact.registry.suiterunner import Semantics
from kl_bitexact.registry.workflows import DirectRun, Workflows


@dataclass(frozen=True)
class RepoState:
    config: RegistryConfig
    files: tuple[ScannedFile, ...]
    python_allowlist: Allowlist | None  # None: the repository has no such file
    yaml_allowlist: Allowlist
    workflows: Workflows
    suite_files: tuple[str, ...]  # every kl-bitexact suite file, for glob matching
    runner_table: frozenset[str] | None  # None: the repository has no runner table
    semantics: Semantics  # what the suite runner does with registrations
    registered: tuple[Root, ...] = ()  # the globs the registered files were listed by

    @cached_property
    def registrations(self) -> tuple[Registration, ...]:
        return tuple(r for scanned in self.files for r in scanned.registrations)

    @cached_property
    def run_by_path(self) -> Mapping[str, DirectRun]:
        """Registered files a workflow runs by path (not through the suite runner), each
        with the first such run."""
        runs = sorted(self.workflows.direct, key=lambda d: (d.file, d.line))
        exact: dict[str, DirectRun] = {}
        for run in runs:
            exact.setdefault(run.path, run)
        folders = [run for run in runs if run.how == "pytest"]  # pytest collects under them
        found: dict[str, DirectRun] = {}
        for file in {r.file for r in self.registrations}:
            hit = exact.get(file) or next((d for d in folders if d.runs(file)), None)
            if hit is not None:
                found[file] = hit
        return found


def read(root: Path, config: RegistryConfig) -> RepoState:
    with _collector_paused():
        return _read(root, config)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a repository is read: the read allocates a
    few hundred thousand small objects and leaves no cycles behind (none were found after
    a read of sglang), yet the collector ran ~110 times during it, 5-7% of a cold lint's
    CPU. Every input is bounded, so the memory is too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read(root: Path, config: RegistryConfig) -> RepoState:
    if not root.is_dir():
        raise ConfigError(f"{root}: repository root not found", hint="pass --root DIR")
    semantics = _semantics(root, config)
    registered = _registered_roots(config, semantics)
    tests = _list_registered(root, registered)
    suites = paths.list_files(root, config.suite_files, config.exclude)
    workflow_files = paths.list_files(root, config.workflows)
    scanned = scancache.scan_all(
        root, tests.files, lambda path: _read_listed(root, path), scan_bytes
    )
    scanned += [suitefiles.scan_suite_file(read_text(root, path), path) for path in suites.files]
    refused = [*tests.outside, *suites.outside, *workflow_files.outside]
    refused += [path for path in _single_files(config) if paths.outside_root(root, path)]
    scanned += [_outside_root(path) for path in sorted(set(refused))]
    return RepoState(
        config=config,
        files=tuple(scanned),
        python_allowlist=_python_allowlist(root, config.python_allowlist),
        yaml_allowlist=_yaml_allowlist(root, config.allowlist),
        workflows=_workflows(root, config, workflow_files.files, _markers(registered)),
        suite_files=tuple(suites.files),
        runner_table=_runner_table(root, config.runner_table),
        semantics=semantics,
        registered=tuple(registered),
    )


def _registered_roots(config: RegistryConfig, semantics: Semantics) -> list[Root]:
    """The globs of registered test files: the suite runner's own (its glob calls and
    `endswith` exclusions), unless `.kl-bitexact.yaml` sets `registered` / `exclude` or
    the runner cannot be read; then the configured globs."""
    if semantics.collection is not None and "registered" not in config.given:
        extra = config.exclude if "exclude" in config.given else ()
        return [Root(r.pattern, r.exclude + extra) for r in semantics.collection]
    return [Root(glob, config.exclude) for glob in config.registered]


def _list_registered(root: Path, roots: list[Root]) -> paths.Listing:
    files: set[str] = set()
    outside: set[str] = set()
    for item in roots:
        listing = paths.list_files(root, (item.pattern,), item.exclude)
        files.update(listing.files)
        outside.update(listing.outside)
    return paths.Listing(sorted(files), sorted(outside))


def _single_files(config: RegistryConfig) -> tuple[str, ...]:
    return (config.python_allowlist, config.allowlist, config.runner_table)


def _outside_root(path: str) -> ScannedFile:
    """A path that resolves outside --root (a symlink): never read, so nothing of the file
    it points to (say /etc/passwd) can reach a message; the finding names only the path."""
    finding = findings.error(
        path,
        1,
        findings.Code.OUTSIDE_ROOT,
        "resolves outside the repository root (a symlink), so lint-ci does not read it",
        "replace the symlink with the file it points to (or point it inside the repository), "
        "or exclude it in .kl-bitexact.yaml",
    )
    return ScannedFile(path, (), False, (finding,))


def _present(root: Path, relative: str) -> bool:
    """A configured single file (allowlist, runner table) exists and may be read: one that
    resolves outside the root is reported by `read` and otherwise taken as absent."""
    return paths.inside(root, relative).is_file() and not paths.outside_root(root, relative)


# Allowlists, workflows and suite files are kilobytes; past this one is not what it claims.
MAX_TEXT_BYTES = 4 * 1024 * 1024


def read_text(root: Path, relative: str) -> str:
    target = paths.inside(root, relative)
    if paths.outside_root(root, relative):  # callers check first; this is the last guard
        raise ConfigError(
            f"{relative}: resolves outside the repository root (a symlink); not read",
            hint="replace the symlink with the file it points to",
        )
    if target.exists() and not target.is_file():  # a FIFO or a device would block or never end
        raise ConfigError(f"{relative}: not a regular file, so it cannot be read")
    try:
        with open(target, encoding="utf-8") as handle:
            text = handle.read(MAX_TEXT_BYTES + 1)
    except UnicodeDecodeError:
        raise ConfigError(f"{relative}: not UTF-8 text") from None
    except OSError as error:
        raise ConfigError(f"{relative}: cannot read ({error.strerror})") from None
    if len(text) > MAX_TEXT_BYTES:
        raise ConfigError(f"{relative}: too large to read (over {MAX_TEXT_BYTES // 2**20} MB)")
    return text


def read_optional(root: Path, relative: str) -> tuple[str | None, str]:
    """ROOT/relative's text, or None and why not: resolving outside the root (a symlink:
    never opened) or unreadable (not UTF-8, too large, not a regular file); "" when there
    is no such file."""
    if paths.outside_root(root, relative):
        return None, "resolves outside the checkout (a symlink), so it is not read"
    if not paths.inside(root, relative).exists():
        return None, ""
    try:
        return read_text(root, relative), ""
    except ConfigError as error:
        return None, error.message


def _read_listed(root: Path, relative: str) -> bytes:
    """A file `paths.list_files` found (so inside the root): without a Path per file, as
    bytes (a cached file is never decoded), at most one byte past the size limit."""
    try:
        descriptor = os.open(os.path.join(root, relative), os.O_RDONLY)
        try:
            return read_bounded(descriptor, scan.MAX_SOURCE_BYTES + 1)
        finally:
            os.close(descriptor)
    except OSError as error:
        raise ConfigError(f"{relative}: cannot read ({error.strerror})") from None


def read_bounded(descriptor: int, limit: int) -> bytes:
    """At most `limit` bytes of an open file, asking for the size fstat gives: one read of
    `limit` bytes allocates that much first (4 MB per test file: a fifth of the CPU of
    scanning sglang cold). A file that grows meanwhile is read on, up to `limit`."""
    chunks = []
    total = 0
    wanted = min(os.fstat(descriptor).st_size + 1, limit)
    while total < limit:
        chunk = os.read(descriptor, min(wanted, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        wanted = 1 << 16
    return b"".join(chunks)


def scan_bytes(raw: bytes, relative: str) -> ScannedFile:
    """`scan.scan_source` of a file's bytes: UTF-8, newlines as text mode reads them."""
    if len(raw) > scan.MAX_SOURCE_BYTES:
        return scan.unreadable(
            relative, f"too large to read (over {scan.MAX_SOURCE_BYTES // 2**20} MB)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{relative}: not UTF-8 text") from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return scan.scan_source(text, relative)


def _semantics(root: Path, config: RegistryConfig) -> Semantics:
    """Read from the python allowlist file (sglang's run_suite.py), then configured."""
    path = config.python_allowlist
    found = Semantics(None)
    if _present(root, path):
        found = suiterunner.read(read_text(root, path), path)
    if config.checked_backends:
        found = replace(found, checked_backends=frozenset(config.checked_backends))
    timeout = _seconds(config.default_timeout_per_file)
    return replace(found, timeout_per_file=timeout) if timeout else found


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(
            f"registry.default-timeout-per-file: {text!r} is not a number of seconds"
        ) from None
    return value if value > 0 else 0.0


def _python_allowlist(root: Path, relative: str) -> Allowlist | None:
    if not _present(root, relative):
        return None
    return allowlists.read_python(read_text(root, relative), relative)


def _yaml_allowlist(root: Path, relative: str) -> Allowlist:
    if not _present(root, relative):
        return Allowlist()
    return allowlists.read_yaml(read_text(root, relative), relative)


def _runner_table(root: Path, relative: str) -> frozenset[str] | None:
    if not _present(root, relative):
        return None
    document = yamlio.load(read_text(root, relative), relative)
    table = document.get("runner_configs") if isinstance(document, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(
            f"{relative}: a runner table needs a `runner_configs:` mapping",
            hint="key it by runner_config, e.g. `runner_configs: {4-gpu-b200: {...}}`",
        )
    return frozenset(str(key) for key in table)


class _Checkout:
    """The repository's files for following commands: only regular files inside the root
    (a path through a symlink out of it is absent), at most MAX_TEXT_BYTES of text."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, bool] = {}  # one lint asks the same paths many times
        self._texts: dict[str, str | None] = {}

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = self._read(path)
        return self._texts[path]

    def _read(self, path: str) -> str | None:
        if not self.is_file(path):
            return None
        try:
            return read_text(self.root, path)
        except ConfigError:
            return None

    def is_file(self, path: str) -> bool:
        if path not in self._files:
            try:
                self._files[path] = _present(self.root, path)
            except (ConfigError, OSError):
                self._files[path] = False
        return self._files[path]


def _workflows(
    root: Path, config: RegistryConfig, files: list[str], markers: tuple[str, ...]
) -> Workflows:
    texts = [(path, read_text(root, path)) for path in files]
    runners = config.suite_runners

    def compute(checkout: shell.Checkout) -> Workflows:
        documents = {path: yamlio.load(text, path) for path, text in texts}
        return workflows.read_all(documents, runners, checkout, markers)

    key = (*runners, "markers:", *markers)
    return workflowcache.cached(root, texts, key, compute, _Checkout(root))


def _markers(roots: list[Root]) -> tuple[str, ...]:
    """What a script that runs a registered file by path has in its text: the last fixed
    directory of each registered glob (`test/registered/**/*.py`: `registered/`), so both
    `python3 test/registered/x.py` and `cd test && python3 registered/x.py` are seen."""
    found = []
    for root in roots:
        fixed = root.pattern.split("*", 1)[0].rsplit("/", 1)[0]
        if fixed:
            found.append(fixed.rsplit("/", 1)[-1] + "/")
    return tuple(dict.fromkeys(found))


def unread_files(state: RepoState) -> list[str]:
    """Registered-file candidates not read because they resolve outside the root (a
    symlink): any suite registered there is invisible to lint-ci, shard and prove-plan."""
    outside = findings.Code.OUTSIDE_ROOT.value
    return [f.path for f in state.files if any(x.code == outside for x in f.findings)]


# YAML files looked through for a suite the configured globs miss (an error's path only).
MAX_STRAY_FILES = 2000


def stray_suite_files(root: Path, config: RegistryConfig, suite: str) -> list[str]:
    """YAML files outside `registry.suite-files` that define the kl-bitexact suite `suite`
    (a mapping with `tests:` registered under that name): a suite that exists but is not
    where shard and prove-plan read suites."""
    listing = paths.list_files(
        root, ("**/*.yaml", "**/*.yml"), (*config.exclude, *config.suite_files)
    )
    found = []
    for path in listing.files[:MAX_STRAY_FILES]:
        text, _ = read_optional(root, path)
        if text is None or "tests" not in text:
            continue
        try:
            scanned = suitefiles.scan_suite_file(text, path)
        except ConfigError:
            continue  # not a suite file at all
        if any(r.suite == suite for r in scanned.registrations):
            found.append(path)
    return found

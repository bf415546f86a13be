"""Fixtures of the pytest plugin: a server per class/module, kl-bitexact checks, records.

The server comes from a suite-style spec named by `@pytest.mark.kl_suite(...)` on the
class or module: a suite YAML path (relative to the test file) or the same mapping inline.
It is launched once per class (once per module for module-level tests), as sglang's
setUpClass does, and stopped by the same teardown ladder as `kl-bitexact run`.

The plugin is imported by every pytest run in the environment, so everything beyond pytest
(YAML, the results model, the engine, check and server modules: numpy, requests) is
imported only when a fixture is used; tests/pytest_plugin/test_plugin_imports.py checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kl_bitexact.errors import ConfigError

if TYPE_CHECKING:
    from kl_bitexact.pytest_plugin.record import Recorder
    from kl_bitexact.results.model import ServerInfo, TestResult
    from kl_bitexact.run import server
    from kl_bitexact.run.engines.base import Engine
    from kl_bitexact.suite import model as suite

# `kl-bitexact pytest` points this at DIR/logs so server logs sit beside pytest's.
LOG_DIR_ENV = "KL_BITEXACT_PYTEST_LOG_DIR"
_NO_TESTS_YET = [{"name": "server", "check": "match"}]  # a suite needs one test to parse


@dataclass(frozen=True)
class SuiteSource:
    """One suite mapping and where it came from (for error messages and `prompts:`)."""

    mapping: Mapping[str, Any]
    source: str
    base_dir: Path

    def parse(self, tests: list[Mapping[str, Any]]) -> suite.Suite:
        import yaml

        from kl_bitexact.suite import load as suite_file

        text = yaml.safe_dump({**self.mapping, "tests": tests})
        return suite_file.parse(text, source=self.source, base_dir=self.base_dir)[0]

    def test_spec(self, name: str, overrides: Mapping[str, Any]) -> suite.TestSpec:
        """The suite's test called `name` (else a test of check `name`), with overrides."""
        listed = self.mapping.get("tests") or []
        found = next((t for t in listed if isinstance(t, dict) and t.get("name") == name), None)
        entry = {**(found or {"name": name, "check": name}), **overrides}
        return self.parse([entry]).tests[0]


def suite_source(marker: pytest.Mark | None, test_file: Path) -> SuiteSource:
    if marker is None or len(marker.args) != 1:
        raise ConfigError(
            f"{test_file}: the kl_server fixture needs a suite spec",
            hint="add pytestmark = pytest.mark.kl_suite('suite.yaml') or "
            "@pytest.mark.kl_suite({'name': ..., 'server': {'engine': 'reference'}})",
        )
    spec = marker.args[0]
    if isinstance(spec, Mapping):
        return SuiteSource(spec, f"{test_file}: kl_suite marker", test_file.parent)
    import yaml

    path = test_file.parent / str(spec)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read the kl_suite spec ({error})") from None
    return SuiteSource(_one_suite(loaded, path, marker.kwargs.get("name")), str(path), path.parent)


def _one_suite(loaded: Any, path: Path, name: str | None) -> Mapping[str, Any]:
    candidates = loaded if isinstance(loaded, list) else [loaded]
    mappings = [item for item in candidates if isinstance(item, Mapping)]
    if name is not None:
        mappings = [item for item in mappings if item.get("name") == name]
    if len(mappings) != 1:
        raise ConfigError(
            f"{path}: the kl_suite spec must select exactly one suite, found {len(mappings)}",
            hint="pass kl_suite('file.yaml', name='suite-name')",
        )
    return mappings[0]


@dataclass(frozen=True)
class KLServer:
    """A running server for the tests of one class or module."""

    source: SuiteSource
    spec: suite.Suite
    running: server.Server
    engine: Engine

    @property
    def base_url(self) -> str:
        return self.running.base_url

    @property
    def info(self) -> ServerInfo:
        from kl_bitexact.results.model import ServerInfo

        args = self.spec.server.command or (self.running.base_url,)
        return ServerInfo(self.spec.server.engine.value, tuple(args), self.running.launch_s)


def serve(request: pytest.FixtureRequest) -> Generator[KLServer, None, None]:
    from kl_bitexact.run import engines, server

    source = suite_source(request.node.get_closest_marker("kl_suite"), request.path)
    spec = source.parse(list(source.mapping.get("tests") or _NO_TESTS_YET))
    base_url = request.config.getoption("kl_base_url") or spec.server.base_url
    label = f"kl_suite {spec.name}"
    if base_url:
        running = server.attach(base_url, label=label)
    else:
        running = server.launch(spec.server, _log_path(request, spec.name), label=label)
    try:
        engine = engines.connect(
            spec.server.engine, running.base_url, request_timeout=spec.server.request_timeout
        )
        yield KLServer(source, spec, running, engine)
    finally:
        running.stop()


def _log_path(request: pytest.FixtureRequest, suite_name: str) -> Path:
    configured = os.environ.get(LOG_DIR_ENV)
    if configured:
        directory = Path(configured)
    else:
        directory = request.getfixturevalue("tmp_path_factory").getbasetemp()
    safe = re.sub(r"[^\w.-]+", "_", f"{suite_name}-{request.node.name}")
    return directory / f"server-{safe}.log"


@pytest.fixture(scope="class")
def kl_server(request: pytest.FixtureRequest) -> Generator[KLServer, None, None]:
    """The server of this class's (or, outside a class, this module's) `kl_suite`."""
    if request.cls is None:
        # A class-scoped fixture outside a class lives per function; share per module.
        yield request.getfixturevalue("kl_module_server")
    else:
        yield from serve(request)


@pytest.fixture(scope="module")
def kl_module_server(request: pytest.FixtureRequest) -> Generator[KLServer, None, None]:
    yield from serve(request)


@pytest.fixture
def kl_record(request: pytest.FixtureRequest) -> Generator[Recorder, None, None]:
    """Record metrics (`kl_div`, `cache_hits`, `exact`) for this test's results.json entry."""
    from kl_bitexact.pytest_plugin.record import Recorder

    recorder = Recorder()
    yield recorder
    request.node.user_properties.extend(recorder.properties())


@pytest.fixture
def kl_check(
    request: pytest.FixtureRequest, kl_server: KLServer, kl_record: Recorder
) -> Callable[..., TestResult]:
    """`kl_check("decode_cache_hit", samples=8, ...)`: run a check against `kl_server`.

    The name is a test of the kl_suite spec, else a check name; keyword arguments are suite
    test keys. The result is recorded; a failed check fails the test, a check that
    measured nothing skips it (and stays `not_run` in results.json).
    """
    from kl_bitexact.results.model import Status

    def run(name: str, **overrides: Any) -> TestResult:
        spec = kl_server.source.test_spec(name, overrides)
        result = _checked(kl_server, spec, request.node.nodeid)
        kl_record.result(result, kl_server.info)
        if result.status in (Status.FAILED, Status.ERROR):
            pytest.fail(result.message, pytrace=False)
        if result.status is Status.NOT_RUN:
            pytest.skip(f"not run: {result.message}")
        return result

    return run


def _checked(kl_server: KLServer, spec: suite.TestSpec, nodeid: str) -> TestResult:
    from kl_bitexact.run.runner import checked

    return checked(kl_server.engine, spec, nodeid, kl_server.running)

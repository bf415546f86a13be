"""`@pytest.mark.kl_expect(fact=value, ...)`: the server facts a test of sglang's own KL
files depends on, checked against what its server reports (issue 35, item 1).

sglang's test classes start their server in `setUpClass` with `other_args`; the marker on
the class (or the module's `pytestmark`, or one test) states what those arguments must
give, as a suite's `expect` does: `@pytest.mark.kl_expect(enable_hierarchical_cache=True,
**{"cuda_graph_config.prefill.backend": "breakable"})`. Under `kl-bitexact pytest` the
observer knows which server the test talked to; after the test body (its server still up)
the facts are read from the server-info answer the test itself received, else from one
`GET /server_info` per server and class, and recorded as a JUnit property that the
importer turns into the test's `facts` - a fact that does not hold makes the test
`not_exercised` there (results.verdict). A test that talked to no server cannot tell.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import msgspec
import pytest

from kl_bitexact.errors import ConfigError, EngineError
from kl_bitexact.run import facts
from kl_bitexact.run.engines.base import Reported
from kl_bitexact.suite import expect
from kl_bitexact.suite.model import Expect
from kl_bitexact.suite.reader import Reader

if TYPE_CHECKING:
    from kl_bitexact.pytest_plugin.observe import TestObservation

MARKER = "kl_expect"
NO_SERVER = (
    "the test sent no request the plugin saw (run it under `kl-bitexact pytest`, whose "
    "observer tells which server a test talks to)"
)
_ASKED: pytest.StashKey[dict[tuple[str, str], Reported]] = pytest.StashKey()


def stated(item: pytest.Item) -> tuple[Expect, ...]:
    """The item's facts: the module's, then its class's, then its own (closest wins)."""
    merged: tuple[Expect, ...] = ()
    for marker in reversed(list(item.iter_markers(MARKER))):
        if marker.args:
            raise pytest.UsageError(f"{item.nodeid}: write @pytest.mark.kl_expect(fact=value)")
        reader = Reader(f"{item.nodeid}: @pytest.mark.{MARKER}", "", {MARKER: marker.kwargs}, None)
        try:
            merged = expect.merged(merged, expect.read(reader, MARKER))
        except ConfigError as error:
            raise pytest.UsageError(f"{error.message} ({error.hint})") from None
    return merged


def record(item: pytest.Item, observed: TestObservation | None) -> str | None:
    """The JUnit property value for the item's facts (None: it states none)."""
    wanted = stated(item)
    if not wanted:
        return None
    found = facts.check(wanted, _reported(item, observed))
    return json.dumps(msgspec.to_builtins(list(found)))


def _reported(item: pytest.Item, observed: TestObservation | None) -> Reported:
    if observed is not None and observed.server_info is not None:
        return Reported(*observed.server_info)
    url = observed.server_url if observed is not None else None
    if url is None:
        return Reported("", {}, why_none=NO_SERVER)
    asked = item.config.stash.setdefault(_ASKED, {})
    key = (url, item.parent.nodeid if item.parent is not None else "")
    if key not in asked:  # once per server and class: setUpClass starts one per class
        asked[key] = _ask(url)
    return asked[key]


def _ask(url: str) -> Reported:
    from kl_bitexact.run.engines.sglang import SglangEngine

    try:
        return SglangEngine(url, request_timeout=60).reported()
    except EngineError as failure:
        return Reported("", {}, why_none=f"asking {url} failed: {failure.message}")

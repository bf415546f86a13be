"""Recording what a pytest test measured, so it lands in results.json as from `run`.

The record is one results.json test entry, written at teardown as a JUnit property
(`kl_bitexact.result`); `kl-bitexact pytest` validates it against the schema and keeps its
fields, taking the id and duration from pytest. A recorded measurement that failed or
measured nothing is never reported as a pass, even if the test forgot to assert.
"""

from __future__ import annotations

import json

from msgspec import structs

from kl_bitexact.ingest import properties as prop
from kl_bitexact.results import io as results_io
from kl_bitexact.results import verdict
from kl_bitexact.results.model import (
    CacheHits,
    ExactMatch,
    Results,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)

UserProperties = list[tuple[str, object]]


class Recorder:
    """The metrics of one test; `kl_record` fixture. Each call replaces that metric."""

    def __init__(self, check: str = "pytest") -> None:
        self._result = TestResult(id="recorded", check=check, status=Status.PASSED)
        self._touched = False
        self._server: ServerInfo | None = None

    @property
    def current(self) -> TestResult:
        return self._result

    def check(self, name: str) -> None:
        self._set(structs.replace(self._result, check=name))

    def kl_div(
        self, value: float, *, threshold: float | None = None, per_sample: tuple[float, ...] = ()
    ) -> None:
        self._set(
            structs.replace(
                self._result,
                kl_div=float(value),
                kl_threshold=None if threshold is None else float(threshold),
                kl_per_sample=tuple(float(item) for item in per_sample),
            )
        )

    def cache_hits(
        self, hit: int, total: int, *, min_ratio: float, expected: int | None = None
    ) -> None:
        self._set(
            structs.replace(self._result, cache_hits=CacheHits(hit, total, min_ratio, expected))
        )

    def exact(self, tokens: int, mismatched: int) -> None:
        self._set(structs.replace(self._result, exact=ExactMatch(tokens, mismatched)))

    def result(self, result: TestResult, server: ServerInfo | None = None) -> None:
        """Keep a whole result, as a kl-bitexact check returned it."""
        self._set(result)
        self._server = server

    def _set(self, result: TestResult) -> None:
        self._result, self._touched = result, True

    def properties(self) -> UserProperties:
        """The JUnit properties for this record; none when nothing was recorded."""
        if not self._touched:
            return []
        recorded: UserProperties = [(prop.RESULT, json.dumps(_entry(_judged(self._result))))]
        if self._server is not None:
            server = {"engine": self._server.engine, "args": list(self._server.args)}
            recorded.append(
                (prop.SERVER, json.dumps({**server, "launch_s": self._server.launch_s}))
            )
        return recorded


def _judged(result: TestResult) -> TestResult:
    """A hand-recorded result's verdict: the one rule `run` and the gate apply."""
    status, reasons = verdict.judge(result, planned=False)
    if status is result.status:
        return result
    return structs.replace(result, status=status, message="; ".join(reasons))


def _entry(result: TestResult) -> object:
    # The JSON of one test exactly as results.json holds it.
    document = results_io.to_json(
        Results(suites=(SuiteResult("recorded", ServerInfo("recorded"), (result,)),))
    )
    return document["suites"][0]["tests"][0]

"""`kl-bitexact explore`: search a server for a cache bug no suite was written for.

It reads the server's cache geometry, generates workloads aimed at its boundaries
(explore/), checks every generated token against an uncached replay, shrinks each
divergence of a bug not reported yet with Hypothesis and writes it as a suite file
`kl-bitexact run` runs (at most --max-findings a run).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kl_bitexact.commands import Command
from kl_bitexact.errors import ConfigError, FatalError, Interrupted, ServerError
from kl_bitexact.explore import floor, handback, pressure, unittest_file
from kl_bitexact.explore.examples import Examples, open_examples
from kl_bitexact.explore.execute import (
    Divergence,
    Outcome,
    execute,
    handed_back_fails,
    pressure_prompts,
)
from kl_bitexact.explore.geometry import Geometry, GeometryError, read_geometry
from kl_bitexact.explore.hits import Miscount
from kl_bitexact.explore.search import MAX_FINDINGS, Found, Search, Tally
from kl_bitexact.explore.summary import summary_text
from kl_bitexact.explore.verdict import RunVerdict, run_verdict
from kl_bitexact.explore.workload import (
    ABANDONED,
    APART,
    TOGETHER,
    Batch,
    Flush,
    Pressure,
    Tokens,
)
from kl_bitexact.results.model import Status
from kl_bitexact.run import engines
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.engines.abandon import HangsUp
from kl_bitexact.run.engines.apart import SendsApart
from kl_bitexact.run.engines.base import Engine
from kl_bitexact.run.server import Server, attach, launch
from kl_bitexact.suite import load as suite_file
from kl_bitexact.suite.model import EngineName, ServerSpec
from kl_bitexact.untrusted.jsonfile import replace_text

DEFAULT_OUT = Path("kl-bitexact-explore")
REPEATS = 3
DEFAULT_FINDINGS = 5
_BUDGET = re.compile(r"(\d+(?:\.\d+)?)([smh]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """argparse type: seconds, or a number with s, m or h ("90", "5m")."""
    match = _BUDGET.fullmatch(text.strip())
    if match is None or float(match[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a budget: give seconds or e.g. 5m")
    return float(match[1]) * _UNIT_S[match[2]]


def parse_max_findings(text: str) -> int:
    """argparse type: how many findings a run may report, 1 to MAX_FINDINGS."""
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_FINDINGS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of findings: give 1 to {MAX_FINDINGS}"
        )
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suite", nargs="?", type=Path, help="a suite file whose first suite's server is launched"
    )
    parser.add_argument("--base-url", help="explore an already running server instead")
    parser.add_argument(
        "--budget", type=parse_budget, default=60.0, help="time to search: seconds or 5m"
    )
    parser.add_argument("--seed", type=int, default=0, help="the same seed, the same workloads")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--max-findings",
        type=parse_max_findings,
        metavar="N",
        default=DEFAULT_FINDINGS,
        help=f"stop after this many different bugs (1 to {MAX_FINDINGS}, default "
        f"{DEFAULT_FINDINGS}); 1 stops at the first, as a quick check would",
    )
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="also send batches apart: each prompt its own request on its own connection, all "
        "at once (what the server serves first then decides its cache hits, so a finding may "
        "not reproduce: explore re-runs it and says how often)",
    )
    examples = parser.add_mutually_exclusive_group()
    examples.add_argument(
        "--examples-db",
        type=Path,
        help="Hypothesis example database: failures found by earlier runs against the same "
        "geometry are replayed first, new ones saved (default OUT/examples)",
    )
    examples.add_argument(
        "--no-examples-db",
        action="store_true",
        help="keep no example database: replay nothing, save nothing",
    )


@dataclass
class Report:
    """What results.json and summary.md say; written after every stage and on a stop."""

    out: Path
    seed: int
    budget_s: float
    max_findings: int = DEFAULT_FINDINGS
    geometry: Geometry | None = None
    tally: Tally | None = None
    # Each finding re-run and handed back, in the order found, with what results.json says.
    handed: list[tuple[Found, dict[str, Any]]] = field(default_factory=list)
    stopped: str | None = None
    notes: list[str] = field(default_factory=list)
    # The example database and how many saved failures it replayed first; None: none kept.
    examples: dict[str, Any] | None = None

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        data = self.data()
        replace_text(self.out / "results.json", json.dumps(data, indent=2) + "\n")
        replace_text(self.out / "summary.md", summary_text(data))

    def verdict(self) -> RunVerdict:
        """What the run amounts to (the exit code), read from what summary.md is written from."""
        return run_verdict(self.data())

    def data(self) -> dict[str, Any]:
        """The results value: results.json, and what summary.md and the verdict read."""
        tally = self.tally
        return {
            "tool": "kl-bitexact explore",
            "seed": self.seed,
            "budget_s": self.budget_s,
            "geometry": self.geometry.as_dict() if self.geometry else None,
            "workloads": tally.examples if tally else 0,
            "requests": tally.requests if tally else 0,
            "restored_from_host": tally.restored if tally else 0,
            "hits_unreported": tally.hits_unreported if tally else 0,
            "rule": floor.rule(self.geometry.deterministic) if self.geometry else None,
            "floor_judged": tally.floor_judged if tally else 0,
            "not_judged": dict(tally.not_judged) if tally else {},
            "floor_nearest": tally.floor_nearest if tally else None,
            "elapsed_s": round(tally.elapsed(), 3) if tally else 0.0,
            "first_found_s": tally.first_found_s if tally else None,
            "first_found_workloads": tally.first_found_workloads if tally else None,
            "stopped": self.stopped,
            "examples_db": self.examples,
            "max_findings": self.max_findings,
            "seen_again": tally.seen_again if tally else 0,
            "findings": self._findings(),
            "notes": self.notes,
        }

    def _findings(self) -> list[dict[str, Any]]:
        """Each finding handed back, then the one being shrunk (not re-run, not handed
        back), each with how many more failing workloads showed only its bug."""
        seen = self.tally.reported if self.tally else {}
        listed = [{**data, "seen_again": seen.get(found.kind, 0)} for found, data in self.handed]
        current = self.tally.found if self.tally else None
        if current is not None and all(current is not found for found, _ in self.handed):
            assert self.geometry is not None  # a finding needs the geometry it was aimed at
            listed.append(_unverified(current, self.geometry, self.tally))
        return listed


@dataclass(frozen=True)
class Options:
    """What `explore` was asked (the command line, or the action's inputs in a values file)."""

    suite: Path | None = None
    base_url: str | None = None
    budget: float = 60.0
    seed: int = 0
    out: Path = DEFAULT_OUT
    examples_db: Path | None = None
    no_examples_db: bool = False
    concurrent: bool = False  # also send batches apart (concurrent requests)
    max_findings: int = DEFAULT_FINDINGS  # different bugs to report before stopping

    def __post_init__(self) -> None:
        if self.budget <= 0:
            raise ValueError(f"budget {self.budget}: give a positive number of seconds")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            args.suite,
            args.base_url,
            args.budget,
            args.seed,
            args.out,
            args.examples_db,
            args.no_examples_db,
            args.concurrent,
            args.max_findings,
        )


def handle(args: argparse.Namespace) -> int:
    return work(Options.from_args(args))


def work(args: Options) -> int:
    """The exploration with `args`: `kl-bitexact explore`, and the action's explore step
    (in its token-free child process)."""
    if (args.suite is None) == (args.base_url is None):
        raise ConfigError(
            "explore needs one server: a suite file or --base-url, not both, not neither",
            hint="kl-bitexact explore --base-url http://127.0.0.1:30000 --budget 5m",
        )
    report = Report(args.out, args.seed, args.budget, args.max_findings)
    spec = _server_spec(args)
    server = _reach(spec, args.out)
    try:
        return _explore(args, spec, server, report)
    except Interrupted as stop:
        report.stopped = f"{stop.name} received; what was found so far is kept"
        report.write()
        raise
    except FatalError as error:  # the server failed or answered wrong: what was kept stays
        report.stopped = f"could not go on: {error.message}"
        report.write()
        raise
    finally:
        server.stop(why="explore is done")


def _server_spec(args: Options) -> ServerSpec:
    if args.base_url:
        return ServerSpec(engine=EngineName.SGLANG, base_url=args.base_url)
    assert args.suite is not None  # work() checked: a suite or a URL
    suites = suite_file.load(args.suite)
    spec = suites[0].server
    if spec.engine is EngineName.OPENAI:
        raise ConfigError(
            f"{args.suite}: explore speaks sglang's native API (engine: sglang or reference)",
            hint="OpenAI-compatible servers are not explored yet (docs/explore.md)",
        )
    return spec


def _reach(spec: ServerSpec, out: Path) -> Server:
    say = _say
    if spec.base_url:
        return attach(spec.base_url, progress=say)
    return launch(spec, out / "server.log", progress=say, label="explore")


def _explore(args: Options, spec: ServerSpec, server: Server, report: Report) -> int:
    engine = engines.connect(spec.engine, server.base_url, request_timeout=spec.request_timeout)
    geometry = _geometry(engine, server.base_url)
    report.geometry = geometry
    _say(f"explore: geometry {geometry.as_dict()}")
    examples = _examples(args, geometry)
    if examples is not None:
        report.examples = {"path": str(examples.path), "replayed_first": examples.saved()}
        _say(f"explore: example database {examples.path}: {examples.saved()} saved failure(s)")
    unfillable = pressure.unfillable(geometry)
    if unfillable:
        report.notes.append(unfillable)
        _say(f"explore: {unfillable}")
    search = Search(
        engine,
        geometry,
        budget_s=args.budget,
        seed=args.seed,
        progress=_say,
        kept=report.write,
        examples=examples,
        sends=_sends(engine, concurrent=args.concurrent),
        max_findings=args.max_findings,
    )
    report.tally = search.tally
    report.write()
    while (found := search.run()) is not None:
        files = Files(args.out, len(report.handed) + 1)
        handed = _finding(engine, geometry, search, found, spec, server.base_url, files)
        report.handed.append((found, handed))
        report.write()
        _say(f"explore: found: {handed['divergence']['located']}")
        _say(f"explore: suite file {files.path(files.suite)}")
    report.write()
    return _ended(report)


def _ended(report: Report) -> int:
    """Say how the run ended, and why when it cannot tell; its exit code (the verdict's,
    the one summary.md's closing line reads)."""
    tally, verdict = report.tally, report.verdict()
    assert tally is not None  # the search ran
    if report.handed:
        again = f"; {tally.seen_again} more failing workload(s) showed them again"
        _say(f"explore: {len(report.handed)} finding(s){again if tally.seen_again else ''}")
    else:
        _say(f"explore: nothing found in {tally.examples} workloads ({tally.requests} requests)")
    for line in verdict.said:
        _say(f"explore: {line}")
    if verdict.cannot_tell:
        _say(f"kl-bitexact: exit {int(verdict.exit_code)}, cannot tell: {verdict.why}")
    return verdict.exit_code


def _examples(args: Options, geometry: Geometry) -> Examples | None:
    if args.no_examples_db:
        return None
    path = args.examples_db or args.out / "examples"
    try:
        return open_examples(path, geometry)
    except OSError as error:
        raise ConfigError(
            f"--examples-db {path}: cannot use it as a directory ({error.strerror})",
            hint="give a writable directory, or --no-examples-db",
        ) from None


def _sends(engine: Engine, *, concurrent: bool) -> tuple[str, ...]:
    """How batches may be sent: in one call always; hung up on mid-prefill where the adapter
    can (sglang's native API); apart (concurrent requests) with --concurrent: their order of
    arrival decides which hits which, so such a finding may not reproduce."""
    sends = [TOGETHER]
    if isinstance(engine, HangsUp):
        sends.append(ABANDONED)
    if concurrent and isinstance(engine, SendsApart):
        sends.append(APART)
    _say(f"explore: batches sent {', '.join(sends)}")
    return tuple(sends)


def _geometry(engine: Engine, url: str) -> Geometry:
    try:
        geometry = read_geometry(engine.server_info(), f"{url}/server_info")
    except GeometryError as error:
        raise ServerError(
            str(error), hint="explore aims at the geometry the server reports"
        ) from None
    _say(f"explore: rule: {floor.rule_text(geometry.deterministic)}")
    return geometry


@dataclass(frozen=True)
class Files:
    """The files finding number `index` is handed back as, under `out`."""

    out: Path
    index: int

    @property
    def suite(self) -> str:
        return f"finding-{self.index}.yaml"

    @property
    def prompts(self) -> str:
        return f"finding-{self.index}.prompts.json"

    @property
    def warm(self) -> str:
        return f"finding-{self.index}.warm.json"

    @property
    def name(self) -> str:
        return f"explore-finding-{self.index}"

    @property
    def unittest(self) -> str:
        return unittest_file.file_name(self.index)

    def path(self, name: str) -> Path:
        return self.out / name


def _finding(
    engine: Engine,
    geometry: Geometry,
    search: Search,
    found: Found,
    spec: ServerSpec,
    url: str,
    files: Files,
) -> dict[str, Any]:
    """Re-run `found`, hand it back as `files`, and say so (results.json's finding)."""
    again = sum(
        1
        for _ in range(REPEATS)
        if execute(engine, found.workload, search.tokens, geometry).findings
    )
    server = _server_block(spec, url)
    as_sent = execute(engine, found.workload, search.tokens, geometry)
    test_file, test_note = _write_unittest(found, as_sent, search.tokens, geometry, files)
    if found.divergence.served.sent == APART and not found.workload.abandoned:
        handed = _hand_back_apart(engine, geometry, found, as_sent, server, files)
    elif isinstance(found.divergence, Miscount):
        handed = _hand_back_miscount(engine, geometry, found, server, files)
    elif found.workload.abandoned:
        handed = _hand_back_abandoned(engine, geometry, search, found, server, files)
    elif _pressure_before(found) and found.divergence.served.generation.cached_tokens:
        handed = _hand_back_pressure(engine, geometry, found, server, files)
    else:
        handed = _hand_back_batch(engine, geometry, found, as_sent, server, files)
    return {
        "workload": found.workload.as_list(),
        "requests": found.workload.requests,
        "kind": str(found.kind),
        "divergence": found.divergence.as_dict(geometry),
        "shrinks": search.tally.shrinks,
        "repeats": f"{again}/{REPEATS}",
        "deterministic": again == REPEATS,
        "suite_file": files.suite,
        "unittest_file": test_file,
        **handed,
        **({"unittest_note": test_note} if test_note else {}),
    }


def _write_unittest(
    found: Found, as_sent: Outcome, tokens: Tokens, geometry: Geometry, files: Files
) -> tuple[str | None, str | None]:
    """The sglang-style unittest file; its name, and a note on the rule it holds the server
    to when that is not every bit (a server that is not deterministic)."""
    unittest = _unittest_text(found, as_sent, tokens, geometry, files.index)
    files.path(files.unittest).write_text(unittest)
    if geometry.deterministic:
        return files.unittest, None
    return files.unittest, (
        "the server is not deterministic: the file holds the cached requests to the "
        f"noise-floor rule ({floor.FACTOR:g} x the same prompts generated cold + "
        f"{floor.MARGIN:g}, through sglang's compare_kl_divergence), not every bit"
    )


def _unittest_text(
    found: Found, as_sent: Outcome, tokens: Tokens, geometry: Geometry, index: int
) -> str:
    """The workload with the token ids explore sent, as an sglang-style unittest file."""
    steps = []
    hung_up = iter(as_sent.abandoned)  # the prompts hung up on, in the order sent
    for position, step in enumerate(found.workload.steps):
        if isinstance(step, Pressure):
            # The pressure prompts as one batch; one new token each (their pages are the
            # same: a request's last token is never cached) keeps the file's replay simple.
            filled = tuple(pressure_prompts(step, position, tokens, geometry))
            steps.append(unittest_file.ConcreteStep(filled, 1))
            continue
        if not isinstance(step, Batch):
            steps.append(unittest_file.ConcreteStep(None))
            continue
        if not step.answered:
            abandoned = tuple(next(hung_up) for _ in step.prompts)
            steps.append(unittest_file.ConcreteStep(abandoned, step.max_new_tokens, True))
            continue
        prompts = tuple(s.prompt for s in as_sent.served if s.step == position)
        apart = step.sent == APART
        steps.append(unittest_file.ConcreteStep(prompts, step.max_new_tokens, apart=apart))
    seen = found.divergence
    expected = (
        {(seen.served.step, seen.served.slot): seen.allowed} if isinstance(seen, Miscount) else {}
    )
    return unittest_file.unittest_text(
        index=index,
        located=seen.as_dict(geometry)["located"],
        steps=steps,
        expected_cached=expected,
        page_size=geometry.page_size,
        noise_floor=None if geometry.deterministic else (floor.FACTOR, floor.MARGIN),
    )


def _hand_back_batch(
    engine: Engine,
    geometry: Geometry,
    found: Found,
    outcome: Outcome,
    server: dict[str, Any],
    files: Files,
) -> dict[str, Any]:
    """The failing batch as a `prefill_cache_hit` test, run here to say whether it fails."""
    step = found.divergence.served.step
    prompts = [s.prompt for s in outcome.served if s.step == step]
    max_new = max(len(s.generation.output_ids) for s in outcome.served if s.step == step)
    files.path(files.prompts).write_text(handback.prompts_text(prompts))
    files.path(files.suite).write_text(
        handback.suite_text(
            name=files.name,
            server=server,
            prompts_file=files.prompts,
            prompts=prompts,
            max_new_tokens=max_new,
            geometry=geometry,
            located=found.divergence.as_dict(geometry)["located"],
        )
    )
    if not geometry.deterministic:
        # The file's test judged by run's own check (its noise floor, as run measures it).
        return _run_handed_back(engine, files)
    fails, cached = handed_back_fails(engine, prompts, max_new)
    verdict = "fails here, as explored" if fails else "does NOT fail here (shape not expressible)"
    return {"handback": f"{verdict} (cached_tokens {list(cached)})", "handback_fails": fails}


def _hand_back_apart(
    engine: Engine,
    geometry: Geometry,
    found: Found,
    outcome: Outcome,
    server: dict[str, Any],
    files: Files,
) -> dict[str, Any]:
    """A finding whose failing batch was sent apart as a `concurrent_prefix_hit` test over
    that batch, the sequences served since the last flush before it warmed first; the
    written file's test is run here by the check `run` uses (its rounds say how often the
    order the server chose made it fail)."""
    step = found.divergence.served.step
    batch = found.workload.steps[step]
    assert isinstance(batch, Batch)
    prompts = [list(s.prompt) for s in outcome.served if s.step == step]
    warm = _warm_before(found, outcome, step)
    files.path(files.prompts).write_text(handback.prompts_text(prompts))
    warm_file = files.warm if warm else None
    if warm_file:
        files.path(warm_file).write_text(handback.prompts_text(warm))
    files.path(files.suite).write_text(
        handback.apart_suite_text(
            name=files.name,
            server=server,
            prompts_file=files.prompts,
            prompts=prompts,
            warm_file=warm_file,
            max_new_tokens=batch.max_new_tokens,
            geometry=geometry,
            located=found.divergence.as_dict(geometry)["located"],
        )
    )
    return _run_handed_back(engine, files)


def _warm_before(found: Found, outcome: Outcome, step: int) -> list[list[int]]:
    """Each sequence (prompt and answer) the workload served after its last flush before
    `step`: what the cache held when the failing batch went out (pressure and requests hung
    up on are not sent again)."""
    flushes = [i for i, s in enumerate(found.workload.steps[:step]) if isinstance(s, Flush)]
    since = flushes[-1] if flushes else -1
    return [
        list(s.prompt + s.generation.output_ids) for s in outcome.served if since < s.step < step
    ]


def _hand_back_abandoned(
    engine: Engine,
    geometry: Geometry,
    search: Search,
    found: Found,
    server: dict[str, Any],
    files: Files,
) -> dict[str, Any]:
    """A divergence after requests hung up on as an `abandoned_prefix_reuse` test over the
    prompts hung up on; the written file's test is run here by the check `run` uses."""
    outcome = execute(engine, found.workload, search.tokens, geometry)
    step = found.workload.steps[found.divergence.served.step]
    assert isinstance(step, Batch)
    prompts = [list(prompt) for prompt in outcome.abandoned]
    files.path(files.prompts).write_text(handback.prompts_text(prompts))
    files.path(files.suite).write_text(
        handback.abandoned_suite_text(
            name=files.name,
            server=server,
            prompts_file=files.prompts,
            prompts=prompts,
            max_new_tokens=step.max_new_tokens,
            geometry=geometry,
            located=found.divergence.as_dict(geometry)["located"],
        )
    )
    return _run_handed_back(engine, files)


def _hand_back_miscount(
    engine: Engine, geometry: Geometry, found: Found, server: dict[str, Any], files: Files
) -> dict[str, Any]:
    """A miscounted hit as a one-conversation `multiturn` test whose prefix is the hit the
    geometry allows; the written file's test is run here by the check `run` uses."""
    miscount = found.divergence
    assert isinstance(miscount, Miscount)
    step = found.workload.steps[miscount.served.step]
    assert isinstance(step, Batch)
    prefix = miscount.allowed or geometry.page_size
    files.path(files.suite).write_text(
        handback.cached_tokens_suite_text(
            name=files.name,
            server=server,
            prefix_tokens=prefix,
            suffix_tokens=max(len(miscount.served.prompt) - prefix, 1),
            max_new_tokens=step.max_new_tokens,
            geometry=geometry,
            located=miscount.locate(geometry),
        )
    )
    return _run_handed_back(engine, files)


def _pressure_before(found: Found) -> float | None:
    """The most pressure the workload sent before the step that diverged (as a multiple of
    the pool); None when it sent none there."""
    step = found.divergence.served.step
    sent = [s.quarters for s in found.workload.steps[:step] if isinstance(s, Pressure)]
    return max(sent) / 4 if sent else None


def _hand_back_pressure(
    engine: Engine, geometry: Geometry, found: Found, server: dict[str, Any], files: Files
) -> dict[str, Any]:
    """A divergence after pressure as a `pressure_restore` test whose shared prefix is the
    hit that diverged; the written file's test is run here by the check `run` uses."""
    divergence = found.divergence
    assert isinstance(divergence, Divergence)
    cached = divergence.served.generation.cached_tokens or geometry.page_size
    step = found.workload.steps[divergence.served.step]
    assert isinstance(step, Batch)
    files.path(files.suite).write_text(
        handback.pressure_suite_text(
            name=files.name,
            server=server,
            prefix_tokens=cached,
            # Two pages past the prefix: each branch leaves it with a page of its own.
            suffix_tokens=2 * geometry.page_size,
            pressure=_pressure_before(found) or 1.0,
            max_new_tokens=step.max_new_tokens,
            geometry=geometry,
            located=divergence.as_dict(geometry)["located"],
        )
    )
    return _run_handed_back(engine, files)


def _run_handed_back(engine: Engine, files: Files) -> dict[str, Any]:
    """The written suite file's test, run here by the check `run` uses: whether it fails."""
    [test] = suite_file.load(files.path(files.suite))[0].tests
    result = run_check(engine, test)
    fails = result.status is Status.FAILED
    verdict = "fails here, as explored" if fails else f"does NOT fail here ({result.status.value})"
    handed = {"handback": f"{verdict}: {result.message}", "handback_fails": fails}
    seen = result.concurrency
    if seen is None:
        return handed
    # How often the order the server chose made the concurrent test fail, and reach its shape.
    rounds = {"rounds": len(seen.rounds), "failed": seen.failed, "reached": seen.reached}
    return {**handed, "handback_rounds": rounds}


def _unverified(found: Found, geometry: Geometry, tally: Tally | None) -> dict[str, Any]:
    """The smallest failing workload seen so far, before it is re-run and handed back: what
    results.json holds while shrinking, and after a stop signal (the server is then asked
    nothing more)."""
    return {
        "workload": found.workload.as_list(),
        "requests": found.workload.requests,
        "kind": str(found.kind),
        "divergence": found.divergence.as_dict(geometry),
        "shrinks": tally.shrinks if tally else 0,
        "repeats": "not re-run yet",
        "deterministic": None,
        "suite_file": None,
        "handback": "not written yet: the finding is still being shrunk, or explore stopped",
        "handback_fails": None,
    }


def _server_block(spec: ServerSpec, url: str) -> dict[str, Any]:
    """How the handed-back suite reaches the server: as explored (a launched reference
    engine with its flags), else the URL (`run FILE --base-url URL` overrides it)."""
    if spec.engine is EngineName.REFERENCE and not spec.base_url:
        launcher = suite_file.reference_command(())
        return {"engine": "reference", "args": list(spec.command[len(launcher) :])}
    return {"engine": "sglang", "base_url": spec.base_url or url}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


COMMAND = Command(
    name="explore",
    summary="search a server for cache bugs no suite was written for, and hand back the test",
    description="Read the server's cache geometry (page size, track interval, prefill chunk, "
    "window), generate workloads aimed at its boundaries - shared prefixes on and beside them, "
    "cached and cold prompts in one batch, multi-turn continuations, flushes - and check every "
    "generated token against an uncached replay (bit for bit on a deterministic server; by "
    "run's noise-floor rule, gate: noise-floor, on one that is not). "
    "Each divergence of a different bug (up to --max-findings) is shrunk with Hypothesis and "
    "written to --out as a suite file.\n\n"
    "exit codes: 1 found; 0 nothing found and everything run was judged; 2 cannot tell "
    "(some of what ran was not judged - answers without cached_tokens, workloads whose noise "
    "floor or cached path compared nothing or whose floor is infinite, no workload judged "
    "or run - summary.md says what) or could not run. Workloads that did not reach the "
    "cache path (the server reported 0 cached tokens for each request) are counted and said, "
    "but are not cannot tell: on a healthy server that is not deterministic most are, and it "
    "exits 0. results.json and summary.md are written as it goes and kept on "
    "SIGINT/SIGTERM. Details: docs/explore.md",
    add_arguments=add_arguments,
    handler=handle,
    clean_environment=True,
    options=Options,
    work=work,
)

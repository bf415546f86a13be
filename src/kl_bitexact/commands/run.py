"""`kl-bitexact run`: run bit-exact suites against inference servers."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kl_bitexact.commands import DEFAULT_OUT, Command, console
from kl_bitexact.commands.console import ConsoleReporter
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.gate import FailOnChoice, Policy, parse_fail_on
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.reach.changes import ChangedCode, changed_code
from kl_bitexact.reference.faults import Fault, parse_fault
from kl_bitexact.report import render, terminal
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import (
    Results,
    Status,
    current_run_info,
)
from kl_bitexact.run import engines
from kl_bitexact.run.runner import Plan, run_suites, test_id
from kl_bitexact.suite import load as suite_file
from kl_bitexact.suite.model import URL_EXAMPLE, EngineName, Gate, Suite, is_server_url
from kl_bitexact.untrusted.jsonfile import replace_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suites",
        nargs="*",
        type=Path,
        metavar="SUITE.yaml",
        help="suite files; with none, the bundled example suite runs against the "
        "bundled reference server, started and stopped by this command",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="where results.json, report.md and logs/ go (default: %(default)s)",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="use an already running server instead of launching the suite's command",
    )
    parser.add_argument(
        "--select",
        action="append",
        metavar="PATTERN",
        help="run only tests whose id (SUITE::TEST) matches; a glob (*, ?) or a "
        "substring; repeatable",
    )
    parser.add_argument(
        "--exact",
        action="store_true",
        help="make every test strict: any differing logprob fails, whatever the KL",
    )
    parser.add_argument(
        "--gate",
        choices=[gate.value for gate in Gate],
        help="judge every test's cache checks this way, whatever the suite says: bit-exact "
        "(the KL threshold, every bit with exact) or noise-floor (an engine that is not "
        "batch-invariant: a cache test fails when its KL exceeds floor_factor x the KL of "
        "the same prompts with no cache + floor_margin)",
    )
    parser.add_argument(
        "--repeat",
        type=_repeat_count,
        default=Options.repeat,
        metavar="N",
        help="run each test N times on the same server launch and compare the runs with "
        "each other: a test whose repeats disagree is `flaky` (default: %(default)s)",
    )
    parser.add_argument(
        "--prove-base",
        type=Path,
        metavar="DIR",
        help="the proof of new tests: run only the tests these suite files add or change "
        "against their versions under DIR (a checkout of the base revision), with every "
        "server started in DIR, so that the base's engine runs the head's tests",
    )
    parser.add_argument(
        "--relaunch",
        action="store_true",
        help="with --repeat: one launch per repeat (the whole run N times, each on a fresh "
        "server), to catch differences that only a restart shows",
    )
    parser.add_argument(
        "--fault",
        action="append",
        type=_fault,
        metavar="NAME",
        help="inject a known cache bug into every embedded reference server the run starts "
        "(the bundled suite's): what a red run looks like, e.g. `kl-bitexact run --fault "
        "branch-checkpoint-reuse`; repeatable; names: "
        + ", ".join(fault.value for fault in Fault)
        + " (docs/reference-engine.md)",
    )
    parser.add_argument(
        "--fail-on",
        type=_fail_on,
        default=FailOnChoice(),
        metavar="MODE[,flaky]",
        help="the gate this run's exit code reports, as `report --fail-on` (one rule: "
        "the same results give the same verdict): regression, failure or never; ',flaky' "
        "for a test whose repeats disagree to gate even when every repeat passed "
        "(default: regression)",
    )
    parser.add_argument(
        "--print-comment",
        action="store_true",
        help="also print the PR comment this run would post (report.md, Markdown) at the end",
    )
    parser.add_argument(
        "--reach-diff",
        metavar="BASE",
        help="the PR's change, reached or not: the functions of the engine's Python code "
        "that changed from BASE (its merge base with HEAD; or BASE..HEAD) in the git "
        "checkout the run starts in are probed on every server the run launches; results.json "
        "and the comment say which tests executed each, and which none did (docs/reach.md)",
    )
    parser.add_argument(
        "--color",
        choices=console.COLOR_CHOICES,
        metavar="WHEN",
        help="colour the status words: auto (default: at a terminal, unless NO_COLOR is set; "
        "never under GitHub Actions), always, never; lines fit the terminal's width (or "
        "COLUMNS)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing on stdout (errors still go to stderr); for scripts, which read "
        "the exit code and DIR/results.json",
    )


MAX_REPEAT = 100


@dataclass(frozen=True)
class Options:
    """Everything `run` was asked to do: from its command line, or from the action's inputs
    (handed to the child process as a values file, commands/values_file.py)."""

    suites: tuple[Path, ...] = ()
    out: Path = Path(DEFAULT_OUT)
    base_url: str | None = None
    select: tuple[str, ...] = ()
    exact: bool = False
    gate: Gate | None = None
    repeat: int = 1
    prove_base: Path | None = None
    relaunch: bool = False
    faults: tuple[Fault, ...] = ()
    fail_on: FailOnChoice = field(default_factory=FailOnChoice)
    print_comment: bool = False
    color: str | None = None
    quiet: bool = False
    reach_diff: str | None = None

    def __post_init__(self) -> None:
        """What the command line's choices hold, held for a values file too (the action's
        child reads one, commands/values_file.py): a wrong value names its key."""
        if self.color is not None and self.color not in console.COLOR_CHOICES:
            allowed = ", ".join(console.COLOR_CHOICES)
            raise ValueError(f"`color`: {self.color!r} is not one of {allowed}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            suites=tuple(args.suites),
            out=args.out,
            base_url=args.base_url,
            select=tuple(args.select or ()),
            exact=args.exact,
            gate=Gate(args.gate) if args.gate else None,
            repeat=args.repeat,
            prove_base=args.prove_base,
            relaunch=args.relaunch,
            faults=tuple(args.fault or ()),
            fail_on=args.fail_on,
            print_comment=args.print_comment,
            color=args.color,
            quiet=args.quiet,
            reach_diff=args.reach_diff,
        )


def _fail_on(text: str) -> FailOnChoice:
    try:
        return parse_fail_on(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _repeat_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_REPEAT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {MAX_REPEAT}")
    return int(text)


def _fault(name: str) -> Fault:
    try:
        return parse_fault(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def handle(args: argparse.Namespace) -> int:
    return run(Options.from_args(args))


def run(args: Options) -> int:
    """The work of `run` (the command, and the action's run step in its child process):
    the exit code is the gate's verdict of what was measured."""
    if not 1 <= args.repeat <= MAX_REPEAT:  # a values file is not parsed by argparse
        raise ConfigError(f"repeat {args.repeat}: not a whole number from 1 to {MAX_REPEAT}")
    suites = select(load_suites(args.suites), args.select)
    if args.faults:
        suites = with_faults(suites, args.faults, attached=args.base_url)
    if args.exact:
        suites = [strict(s) for s in suites]
    if args.gate:
        suites = [gated(s, args.gate) for s in suites]
    if args.base_url:
        check_base_url(args.base_url)
    out: Path = args.out
    prepare_out(out)
    _check_relaunch(args, suites)
    reporter = _reporter(args)
    if args.prove_base is not None:
        suites = _to_prove(suites, args.suites, args.prove_base, reporter.say)
        if not suites:
            _write_outputs(Results(run=current_run_info()), out)
            written = out / "results.json"
            print(
                f"kl-bitexact: no new or changed test to prove against {args.prove_base}; "
                f"wrote {written}",
                file=sys.stderr,
            )
            return int(ExitCode.GATE_PASSED)
    plan = Plan(
        tuple(suites),
        out / "logs",
        connect=console.counting(engines.connect, reporter.tally),
        run=current_run_info(),
        base_url=args.base_url,
        repeat=args.repeat,
        relaunch=args.relaunch,
        cwd=args.prove_base,
        changes=_changes(args, reporter.say),
    )
    choice = args.fail_on
    policy = Policy(
        choice.mode,
        flaky=choice.flaky,
        allow_known=choice.allow_known,
        unreached=choice.unreached,
    )
    _, comparison = _run_writing(plan, reporter, out, policy)
    code = comparison.decision.exit_code
    if args.prove_base is not None:
        # Red on the base revision is what a proof hopes for, and an error there is
        # "could not prove": `report --proof` judges them; the proof run itself passes.
        reporter.say("kl-bitexact: proof run; `report --proof` / `publish --proof` judge it")
        code = ExitCode.GATE_PASSED
    if args.print_comment:
        _print_comment((out / "report.md").read_text(encoding="utf-8"), github=reporter.github)
    _summary(comparison, out, reporter)
    if (last := terminal.exit_line(comparison, code)) is not None:
        for part in reporter.style.wrap(last, "", "  "):
            reporter.say(part)
    return int(code)


def _changes(args: Options, say: Callable[[str], None]) -> ChangedCode | None:
    """`--reach-diff`: the PR's changed functions in the checkout the run starts in."""
    if args.reach_diff is None or args.prove_base is not None:
        return None  # a proof run measures the base's engine: the change is not in it
    code = changed_code(Path.cwd(), args.reach_diff)
    files = len(code.files)
    say(
        f"kl-bitexact: probing {len(code.functions)} changed function(s) in {files} file(s) "
        f"of {code.base[:12]}..{code.head[:12]}"
    )
    return code


def _run_writing(
    plan: Plan, reporter: ConsoleReporter, out: Path, policy: Policy
) -> tuple[Results, Comparison]:
    """The run, results.json rewritten after every test; results.json and report.md
    written however it ends. The comparison (without a base) is the gate's verdict of
    these results, the one `report` gives them: the exit code is its."""
    latest = Results(run=plan.run)

    def save(partial: Results) -> None:
        nonlocal latest
        latest = partial
        results_io.write_atomic(partial, out / "results.json")

    try:
        final = run_suites(plan, reporter, save)
    except BaseException:
        # The one shutdown path (a stop signal, a crash): the runner has stopped the
        # servers; what finished is written before the exit code is decided.
        _write_outputs(latest, out, policy)
        written = f"{out / 'results.json'} and {out / 'report.md'}"
        reporter.say(f"kl-bitexact: wrote what finished to {written}")
        raise
    return final, _write_outputs(final, out, policy)


def _reporter(args: Options) -> ConsoleReporter:
    color = args.color or ("never" if os.environ.get("GITHUB_ACTIONS") == "true" else "auto")
    style = console.Style(
        colour=console.wants_colour(color, sys.stdout, os.environ),
        width=console.line_width(sys.stdout, os.environ),
    )
    return ConsoleReporter(
        github=os.environ.get("GITHUB_ACTIONS") == "true",
        quiet=args.quiet,
        style=style,
        live=sys.stdout.isatty(),
    )


def _summary(comparison: Comparison, out: Path, reporter: ConsoleReporter) -> None:
    """The tally in the states' words, each test that is not ok with its state and where it
    first diverged (or why it failed), and where the files are; the comment itself only
    on request (--print-comment)."""
    style, say = reporter.style, reporter.say
    say("")
    say(terminal.tally(comparison))
    lines = terminal.not_passed_lines(comparison)
    width = max((len(line.state) for line in lines), default=0)
    for line in lines:
        hanging = " " * (width + 4)
        for n, part in enumerate(style.wrap(line.plain(width).strip(), "  ", hanging)):
            # The state coloured as its test's status; the padding stays outside the colour.
            say(
                part.replace(line.state, style.status(line.status, line.state), 1)
                if n == 0
                else part
            )
    say(f"results: {out / 'results.json'}")
    say(f"report:  {out / 'report.md'} (the PR comment; --print-comment prints it)")


def _write_outputs(results: Results, out: Path, policy: Policy | None = None) -> Comparison:
    """results.json and report.md; report.md is the PR comment this run would post (no
    baseline, no resolved blockers: `publish` adds those)."""
    results_io.write_atomic(results, out / "results.json")
    comparison = compare(results, None, policy=policy)
    replace_text(out / "report.md", render.comment(comparison))
    return comparison


def check_base_url(url: str) -> None:
    """Refuse at once what cannot be a server's address (instead of 30 s of retries)."""
    if not is_server_url(url):
        raise ConfigError(
            f"--base-url {url}: not an http(s) URL with a host",
            hint=f"e.g. --base-url {URL_EXAMPLE} (the server's address, no path)",
        )


def prepare_out(out: Path) -> None:
    """--out must be a directory we can write, checked before any server starts."""
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"--out {out}: is a file, not a directory",
            hint="pass a directory (it is created if missing)",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".kl-bitexact-write-check.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ConfigError(
            f"--out {out}: cannot write there ({error.strerror})",
            hint="pass a directory you can write to",
        ) from None


def _to_prove(
    suites: list[Suite],
    head_files: Sequence[Path],
    prove_base: Path,
    say: Callable[[str], None],
) -> list[Suite]:
    """The tests the suite files add or change against the base checkout (--prove-base)."""
    if not head_files:
        raise ConfigError("--prove-base needs the head's suite files", hint="pass SUITE.yaml ...")
    from kl_bitexact.commands.input_files import base_checkout  # --prove-base only
    from kl_bitexact.suite import changes

    base = base_checkout(prove_base)

    found = changes.changed_tests(suites, head_files, base)
    for change in found:
        say(f"to prove: {change.test_id} ({change.kind})")
    wanted = {change.test_id for change in found}
    kept = [
        dataclasses.replace(s, tests=tuple(t for t in s.tests if test_id(s, t) in wanted))
        for s in suites
    ]
    return [s for s in kept if s.tests]


def _check_relaunch(args: Options, suites: Sequence[Suite]) -> None:
    if not args.relaunch:
        return
    if args.repeat < 2:
        raise ConfigError("--relaunch needs --repeat N with N >= 2", hint="add --repeat 3")
    attached = args.base_url or next((s.server.base_url for s in suites if s.server.base_url), None)
    if attached:
        raise ConfigError(
            f"--relaunch cannot restart the server at {attached}: kl-bitexact did not start it",
            hint="drop --relaunch, or let the suite's server.command launch the server",
        )


def _print_comment(report: str, *, github: bool) -> None:
    # Printed even under --quiet: asking for the comment is asking for stdout.
    print("::group::the PR comment this run would post" if github else "\n" + "-" * 72)
    print(report.rstrip("\n"))
    print("::endgroup::" if github else "-" * 72)


def load_suites(paths: Sequence[Path]) -> list[Suite]:
    if not paths:
        return suite_file.load_bundled()
    loaded = [s for path in paths for s in suite_file.load(path)]
    # A suite name may span files (`shard` splits a suite's files); a test id may not.
    seen: dict[str, str] = {}
    for item in loaded:
        for spec in item.tests:
            identifier = test_id(item, spec)
            if identifier in seen:
                raise ConfigError(
                    f"test {identifier!r} is defined in both {seen[identifier]} and {item.source}",
                    hint="rename one: test ids (SUITE::TEST) are unique in a run",
                )
            seen[identifier] = item.source
    return loaded


def select(suites: list[Suite], patterns: Sequence[str]) -> list[Suite]:
    """Keep the tests whose id matches any pattern; an empty selection is an error."""
    if not patterns:
        return suites
    kept = [
        dataclasses.replace(s, tests=tuple(t for t in s.tests if _matches(test_id(s, t), patterns)))
        for s in suites
    ]
    kept = [s for s in kept if s.tests]
    if not kept:
        ids = ", ".join(test_id(s, t) for s in suites for t in s.tests)
        raise ConfigError(
            f"--select {' '.join(patterns)} matched no test", hint=f"test ids are: {ids}"
        )
    return kept


def _matches(identifier: str, patterns: Sequence[str]) -> bool:
    return any(
        fnmatch.fnmatchcase(identifier, p) if any(c in p for c in "*?[") else p in identifier
        for p in patterns
    )


def with_faults(
    suites: list[Suite], faults: Sequence[Fault], *, attached: str | None
) -> list[Suite]:
    """`--fault NAME ...` added to the command of every reference server the run launches."""
    flags = tuple(part for fault in faults for part in ("--fault", fault.value))
    launched = [
        s.server.engine is EngineName.REFERENCE and not s.server.base_url and not attached
        for s in suites
    ]
    if not any(launched):
        raise ConfigError(
            "--fault acts on the embedded reference engine that run starts, and no suite here "
            "starts one" + (f" (--base-url {attached})" if attached else ""),
            hint="run the bundled suite (no suite files), or suites with `engine: reference`",
        )
    return [
        dataclasses.replace(
            s, server=dataclasses.replace(s.server, command=s.server.command + flags)
        )
        if ours
        else s
        for s, ours in zip(suites, launched, strict=True)
    ]


def gated(item: Suite, gate: Gate) -> Suite:
    """`--gate`: every test judged so."""
    return dataclasses.replace(
        item, tests=tuple(dataclasses.replace(t, gate=gate) for t in item.tests)
    )


def strict(item: Suite) -> Suite:
    return dataclasses.replace(
        item, tests=tuple(dataclasses.replace(t, exact=True) for t in item.tests)
    )


def _tally(final: Results, style: console.Style | None = None) -> str:
    style = style or console.Style()
    counts: dict[str, int] = {}
    for _, test in final.all_tests():
        counts[test.status.value] = counts.get(test.status.value, 0) + 1
    parts = [style.status(Status(name), f"{n} {name}") for name, n in sorted(counts.items())]
    return ", ".join(parts) or "no tests"


COMMAND = Command(
    name="run",
    summary="run bit-exact suites and write results.json",
    description="Run bit-exact suites against an inference server: score every generated token "
    "while decoding and in a fresh prefill replay, compare, and count cache hits.",
    add_arguments=add_arguments,
    handler=handle,
    clean_environment=True,
    options=Options,
    work=run,
)

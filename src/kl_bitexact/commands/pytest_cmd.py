"""`kl-bitexact pytest`: run existing pytest/unittest suites and turn them into results.

pytest runs in a child process (the suites launch servers and may crash or hang); it
writes JUnit XML with every test's captured output, which `junit_results` converts. The
child's console output is shown live and kept in DIR/logs/pytest.log.

With `--prove-base DIR` (the proof of new tests, docs/suites.md) it runs the tests the head's
files add or change with the base revision's engine (registry/proof_checkout.py: each head
file is copied over its base version and put back afterwards), pytest runs in DIR with the base's
engine package first on PYTHONPATH, and whatever cannot run there is a reason in the results
(ingest/pytest_proof.py), never an exit code: the proof run exits 0, `report --proof` judges.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from msgspec import structs

import kl_bitexact
from kl_bitexact.commands import DEFAULT_OUT, Command
from kl_bitexact.commands.arguments import add_common_arguments, ratio_problem
from kl_bitexact.commands.input_files import base_checkout
from kl_bitexact.commands.junit_import import (
    import_and_write,
    import_junit,
    read_plan,
    with_plan,
    write_and_list,
)
from kl_bitexact.errors import ConfigError, ExitCode, FatalError, Interrupted
from kl_bitexact.ingest import pytest_proof
from kl_bitexact.ingest.junit import JUnitCase
from kl_bitexact.ingest.junit_results import SGLANG_MIN_CACHE_HIT_RATIO
from kl_bitexact.pytest_plugin import EXACT, OBSERVE, PLAN, PROVE_UNIT
from kl_bitexact.pytest_plugin.fixtures import LOG_DIR_ENV
from kl_bitexact.reach.probe_dir import session_environment
from kl_bitexact.registry import proof_checkout
from kl_bitexact.results.model import PlannedTest, Results, current_run_info
from kl_bitexact.run.runner import why_stopped
from kl_bitexact.run.session import Session
from kl_bitexact.untrusted import confined

# pytest's own exit codes (pytest.ExitCode), named here for the messages.
_PYTEST_USAGE_ERROR = 4
_PYTEST_NO_TESTS = 5
# Options kl-bitexact sets itself; a user's value would silently lose or break the import.
_OWNED_OPTIONS = ("--junitxml", "--junit-xml", "--junitprefix", PLAN)
# The plugin's list of the collected tests (`--kl-plan`), under DIR/logs.
PLAN_FILE = "pytest-plan.json"
# pytest's exits that are not a lost run: a usage error, nothing collected.
_NO_RESULTS = (_PYTEST_USAGE_ERROR, _PYTEST_NO_TESTS)


# The base checkout's directory holding the engine's package, when it has one: sglang's
# `python/sglang` (its test files import `sglang.test...` from there).
DEFAULT_ENGINE_PATH = "python"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "results.json, junit.xml and logs/pytest.log")
    parser.add_argument(
        "--prove-base",
        type=Path,
        metavar="DIR",
        help="the proof of new tests: run only the tests the test files after `--` add or "
        "change against their versions under DIR (a checkout of the base revision), each "
        "head file copied over its base version for the run, in DIR, with DIR's engine "
        "package first on PYTHONPATH; exit 0 whatever they measure (`report --proof` judges)",
    )
    parser.add_argument(
        "--prove-pythonpath",
        action="append",
        metavar="REL",
        help="with --prove-base: a directory of the base checkout to put first on PYTHONPATH "
        f"(the engine's package); repeatable (default: {DEFAULT_ENGINE_PATH}, when DIR has "
        "it: sglang's layout)",
    )
    parser.add_argument(
        "--exact",
        action="store_true",
        help="any logprob that differs between a decode and its replay fails the test, "
        "whatever the test's own threshold says (the plugin pairs the logprobs its server "
        "answers; the counts are recorded either way)",
    )
    parser.add_argument(
        "--python",
        metavar="INTERPRETER",
        help="run pytest with this interpreter (where the engine is installed: its packages "
        "come first), with kl-bitexact's own packages added after them; default: the "
        "interpreter running kl-bitexact (the action: its `python` input)",
    )
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        metavar="-- PYTEST_ARGS",
        help="arguments passed to pytest (test files, -k, -x, ...)",
    )


@dataclass(frozen=True)
class Options:
    """Everything `pytest` was asked to do: from its command line, or from the action's
    inputs (handed to the child process as a values file, commands/values_file.py)."""

    pytest_args: tuple[str, ...] = ()
    out: Path = Path(DEFAULT_OUT)
    min_cache_hit_ratio: float = SGLANG_MIN_CACHE_HIT_RATIO
    prove_base: Path | None = None
    prove_pythonpath: tuple[str, ...] = ()
    exact: bool = False
    python: str | None = None

    def __post_init__(self) -> None:
        """What `--min-cache-hit-ratio` holds, held for a values file too (the action's
        child reads one, commands/values_file.py): a wrong value names its key."""
        if problem := ratio_problem(self.min_cache_hit_ratio):
            raise ValueError(f"`min_cache_hit_ratio`: {problem}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        raw: list[str] = args.pytest_args
        return cls(
            pytest_args=tuple(raw[1:] if raw[:1] == ["--"] else raw),
            out=args.out,
            min_cache_hit_ratio=args.min_cache_hit_ratio,
            prove_base=args.prove_base,
            prove_pythonpath=tuple(args.prove_pythonpath or ()),
            exact=args.exact,
            python=args.python,
        )


def handle(args: argparse.Namespace) -> int:
    return run_pytest(Options.from_args(args))


def run_pytest(args: Options) -> int:
    """The work of `pytest` (the command, and the action's run step in its child process)."""
    pytest_args = _user_arguments(args.pytest_args)
    if args.prove_base is not None:
        return _prove(args, args.prove_base, pytest_args)
    if args.prove_pythonpath:
        raise ConfigError("--prove-pythonpath goes with --prove-base DIR")
    out = args.out
    junit_path, log_path = out / "junit.xml", out / "logs" / "pytest.log"
    plan_path = out / "logs" / PLAN_FILE
    for stale in (junit_path, plan_path):  # never read a file from an earlier run
        stale.unlink(missing_ok=True)
    command = pytest_command(pytest_args, junit_path, args.python, exact=args.exact)
    command += [PLAN, str(plan_path)]
    # The reach probe, loaded in pytest and every server a test starts (docs/reach.md).
    env = session_environment(out / "logs" / "reach", _interpreter_env(os.environ, args.python))
    try:
        returncode = _run_child(command, log_path, env=env)
    except Interrupted as stop:
        # pytest got SIGINT and had its time to write its XML (run/session.py): keep what
        # finished, the interrupted test and those never started as the runner's errors.
        _write_stopped(args, junit_path, log_path, read_plan(plan_path), why_stopped(stop))
        raise
    plan = read_plan(plan_path)
    if not junit_path.exists() and plan is not None and returncode not in _NO_RESULTS:
        why = f"pytest exited with code {returncode} before writing its results"
        _write_stopped(args, junit_path, log_path, plan, f"{why} (killed or crashed)")
    _check_child(returncode, junit_path, log_path)
    results = out / "results.json"
    ratio = args.min_cache_hit_ratio
    return import_and_write(junit_path, log_path, results, ratio, plan, rerun_command(args))


def rerun_command(args: Options) -> tuple[str, ...]:
    """This session's command for one test, its node id to be appended: the same
    interpreter and --exact (what the verdict depends on). The session's pytest arguments
    are left out: most select tests, which the node id does; an option the tests need
    (`-p`, `-o`, a plugin's) is added by hand (docs/pytest.md says so)."""
    python = ("--python", args.python) if args.python else ()
    return ("kl-bitexact", "pytest", *(("--exact",) if args.exact else ()), *python, "--")


def _write_stopped(
    args: Options,
    junit_path: Path,
    log_path: Path,
    plan: tuple[PlannedTest, ...] | None,
    reason: str,
) -> None:
    """results.json of a session that did not finish: what pytest reported, and every
    planned test without a result as an error saying `reason`; `finished: false`."""
    imported = Results(run=current_run_info())
    if junit_path.exists():
        with contextlib.suppress(FatalError):  # a half-written XML: the plan still says it
            ratio = args.min_cache_hit_ratio
            rerun = rerun_command(args)
            _, imported = import_junit(junit_path, log_path, ratio, interrupted=True, rerun=rerun)
    if plan is not None:
        imported = with_plan(imported, plan, reason)
    run = structs.replace(imported.run, finished=False)
    write_and_list(structs.replace(imported, run=run), args.out / "results.json")


def _user_arguments(arguments: Sequence[str]) -> list[str]:
    for argument in arguments:
        if argument.split("=", 1)[0] in _OWNED_OPTIONS:
            raise ConfigError(
                f"pytest argument {argument!r} is set by kl-bitexact pytest itself",
                hint="drop it; the JUnit XML is written to DIR/junit.xml (see --out)",
            )
    return list(arguments)


# `--python`: pytest started under another interpreter, which finds kl-bitexact (the plugin)
# and its dependencies after its own packages: appended to sys.path, .pth files processed,
# so the engine's numpy or torch are never shadowed by kl-bitexact's pins.
_OWN_PATHS_ENV = "KL_BITEXACT_OWN_PATHS"
_BOOTSTRAP = (
    "import os, site, sys\n"
    f"own, *sites = os.environ.pop({_OWN_PATHS_ENV!r}).split(os.pathsep)\n"
    "sys.path.append(own)\n"
    "for directory in sites:\n"
    "    site.addsitedir(directory)\n"
    "import pytest\n"
    "sys.exit(pytest.console_main())\n"
)


def pytest_command(
    pytest_args: Sequence[str], junit_path: Path, python: str | None = None, *, exact: bool = False
) -> list[str]:
    """The child's command line: JUnit XML holding every test's output, passing ones too."""
    start = [python, "-c", _BOOTSTRAP] if python else [sys.executable, "-m", "pytest"]
    command = [*start, *pytest_args, f"--junitxml={junit_path}"]
    # What `python3 file.py` runs: no imported test_* helper collected as a test.
    command += ["--kl-own-tests-only"]
    # The exact counts of the logprobs each test's server answers (pytest_plugin/observe.py).
    command += [EXACT] if exact else [OBSERVE]
    command += ["-o", "junit_logging=all", "-o", "junit_log_passing_tests=true"]
    # xunit1 adds the file attribute, from which node ids are rebuilt without the plugin.
    command += ["-o", "junit_family=xunit1"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        # The entry point is not loaded then; name the plugin explicitly (once only:
        # pytest refuses a plugin registered twice).
        command += ["-p", "kl_bitexact.pytest_plugin"]
    return command


def _interpreter_env(environ: Mapping[str, str], python: str | None) -> dict[str, str]:
    """The child's environment: for `--python`, where this kl-bitexact and its
    dependencies are (read and removed by the bootstrap, so no grandchild sees them)."""
    if not python:
        return dict(environ)
    if shutil.which(python) is None:
        raise ConfigError(
            f"--python {python}: no such interpreter",
            hint="give the path (or the name on PATH) of the Python the engine is installed in",
        )
    own = str(Path(kl_bitexact.__file__).resolve().parents[1])
    sites = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    return {**environ, _OWN_PATHS_ENV: os.pathsep.join([own, *sites])}


def _run_child(
    command: Sequence[str],
    log_path: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    session: Session | None = None,
) -> int:
    """pytest as a guarded session (run/session.py: its own group, the teardown ladder,
    the parent-death signal, a watchdog, and whatever left the group swept), its output
    shown live and kept in `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("", encoding="utf-8")  # appended to, by the watchdog's notes too
    environment = {**(os.environ if env is None else env), LOG_DIR_ENV: str(log_path.parent)}
    with log_path.open("a", encoding="utf-8") as log:

        def show(line: str) -> None:
            for sink in (sys.stdout, log):
                sink.write(line)
                sink.flush()

        if session is not None:
            return session.run(command, show, cwd=cwd, env=environment)
        with Session(log_path) as own:
            return own.run(command, show, cwd=cwd, env=environment)


def _check_child(returncode: int, junit_path: Path, log_path: Path) -> None:
    if returncode == _PYTEST_USAGE_ERROR:
        raise ConfigError(
            f"pytest stopped with a usage error (exit {returncode}): {_usage_error(log_path)}",
            hint=f"fix the arguments after `--` or the marker named; pytest's output: {log_path}",
        )
    if returncode == _PYTEST_NO_TESTS:
        raise FatalError(
            f"pytest collected no tests (exit {returncode}); its output is in {log_path}",
            hint="pass test files or directories after `--`",
        )
    if not junit_path.exists():
        raise FatalError(
            f"pytest exited with code {returncode} without writing {junit_path}; "
            f"its output is in {log_path}",
            hint="the run crashed or was killed before pytest finished",
        )


def _usage_error(log_path: Path) -> str:
    # pytest prints a bad option as argparse does ("pytest: error: ...") and any other
    # usage error (a bad marker argument) as "ERROR: ...".
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if "pytest: error: " in line:
            return line.split("pytest: error: ", 1)[1]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    return errors[-1] if errors else "see its output"


# --- the proof of new tests (--prove-base) ---------------------------------------------


def _prove(args: Options, prove_base: Path, pytest_args: list[str]) -> int:
    base = base_checkout(prove_base).resolve()
    files = [arg for arg in pytest_args if arg.endswith(".py") and not arg.startswith("-")]
    if not files:
        raise ConfigError(
            "--prove-base needs the head's test files after `--`",
            hint="e.g. kl-bitexact pytest --prove-base ../base -- test/registered/x/test_y.py",
        )
    options = [arg for arg in pytest_args if arg not in files]
    engine = _engine_paths(base, args.prove_pythonpath)
    units, refused = proof_checkout.changed_units([_relative_file(file) for file in files], base)
    out: Path = args.out.resolve()
    junit_path, log_path = out / "junit.xml", out / "logs" / "pytest.log"
    junit_path.unlink(missing_ok=True)
    if not units:
        write_and_list(Results(run=current_run_info()), out / "results.json")
        print(f"kl-bitexact: no new or changed test to prove against {base}", file=sys.stderr)
        return int(ExitCode.GATE_PASSED)
    for unit in units:
        print(f"to prove: {unit}")
    print(f"engine code: {', '.join(map(str, engine)) or '(none added)'} first on PYTHONPATH")
    runnable = sorted({unit.partition("::")[0] for unit in units} - set(refused))
    # The session's watchdog outlives the base files' journal: a SIGKILLed run still has
    # them put back (issue 30, item 6).
    with (
        Session(log_path) as session,
        proof_checkout.head_files_in(base, runnable, session.journal) as not_copied,
    ):
        refused |= not_copied
        runnable = [file for file in runnable if file not in not_copied]
        returncode = _run_proof(
            runnable,
            options,
            units,
            base,
            engine,
            args.python,
            junit_path,
            log_path,
            session,
            args.exact,
        )
    failure = _proof_failure(returncode, junit_path, log_path)
    cases: tuple[JUnitCase, ...] = ()
    imported = Results(run=current_run_info())
    if junit_path.exists():
        cases, imported = import_junit(junit_path, log_path, args.min_cache_hit_ratio)
    proof = pytest_proof.proof_results(imported, cases, units, refused, failure)
    write_and_list(proof, out / "results.json")
    print("kl-bitexact: proof run; `report --proof` / `publish --proof` judge it")
    return int(ExitCode.GATE_PASSED)


def _engine_paths(base: Path, given: Sequence[str]) -> list[Path]:
    """The base checkout's engine package directories, to put first on PYTHONPATH."""
    if not given:
        default = base / DEFAULT_ENGINE_PATH
        return [default] if default.is_dir() else []
    for relative in given:
        if confined.outside_root(base, relative) or not (base / relative).is_dir():
            raise ConfigError(
                f"--prove-pythonpath {relative}: not a directory inside {base}",
                hint="give a directory of the base checkout, relative to it (e.g. python)",
            )
    return [base / relative for relative in given]


def _relative_file(file: str) -> str:
    path = Path(file)
    if path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"{file}: give the head's test files relative to the head checkout's root",
            hint="run from the head checkout's root (the proof copies each file to the same "
            "path in the base checkout)",
        )
    return path.as_posix()


def _run_proof(
    files: Sequence[str],
    options: Sequence[str],
    units: Sequence[str],
    base: Path,
    engine: Sequence[Path],
    python: str | None,
    junit_path: Path,
    log_path: Path,
    session: Session,
    exact: bool = False,
) -> int | None:
    """pytest over the head files in the base checkout, only the units; None: not run.
    `exact`: a differing logprob is red on the base too (the head is judged the same way)."""
    if not files:
        return None
    selected = [arg for unit in units for arg in (PROVE_UNIT, unit)]
    # One file the base cannot import must not keep the others from running.
    arguments = [*options, *files, "--continue-on-collection-errors", *selected]
    inherited = os.environ.get("PYTHONPATH", "")
    pythonpath = os.pathsep.join([*map(str, engine), *([inherited] if inherited else [])])
    env = _interpreter_env({**os.environ, "PYTHONPATH": pythonpath}, python)
    command = pytest_command(arguments, junit_path, python, exact=exact)
    return _run_child(command, log_path, cwd=base, env=env, session=session)


def _proof_failure(returncode: int | None, junit_path: Path, log_path: Path) -> str:
    """Why pytest did not finish on the base revision, in words ("" when it did)."""
    if returncode is None:
        return ""
    if returncode == _PYTEST_USAGE_ERROR:
        return f"pytest stopped with a usage error on the base revision: {_usage_error(log_path)}"
    if not junit_path.exists():
        return (
            f"pytest exited with code {returncode} on the base revision without writing its "
            f"results (killed or crashed); its output: {log_path}"
        )
    return ""


COMMAND = Command(
    name="pytest",
    summary="run sglang-style pytest/unittest suites and recover their KL metrics",
    description="Run existing bit-exact test files with pytest and convert every test, and the "
    "KL and cache-hit lines it printed, into DIR/results.json. Example:\n"
    "  kl-bitexact pytest --out results -- test/registered/kl/test_swa_kl.py -k decode\n"
    "The proof of new tests (the head's new and changed tests, base revision's engine):\n"
    "  kl-bitexact pytest --prove-base ../base --out results-proof -- test/registered/kl/x.py",
    add_arguments=add_arguments,
    handler=handle,
    clean_environment=True,
    options=Options,
    work=run_pytest,
)

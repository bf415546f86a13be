"""The reach probe on its own: a plain interpreter of every supported Python version with
the probe's directory on PYTHONPATH, a module of named functions, a spawned child and
test boundaries marked between commands. No kl_bitexact in the probed process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.reach import hits
from kl_bitexact.reach.probe_dir import NOT_LAUNCHED, Probe
from kl_bitexact.results import verdict
from kl_bitexact.results.model import FunctionReach, RanWhen, Reach, Status, TestResult

PYENV = Path.home() / ".pyenv" / "versions"


def interpreters() -> list[str]:
    """This Python and every other supported one installed (pyenv's, if any)."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    for minor in (10, 11, 12, 13):
        candidates = sorted(PYENV.glob(f"3.{minor}.*/bin/python3"))
        if candidates:
            found.setdefault(f"3.{minor}", str(candidates[-1]))
    return [found[key] for key in sorted(found)]


TARGET = """
class Runner:
    def __init__(self):
        self.n = 0

    def method(self):
        return "method"

    @staticmethod
    def static():
        return "static"

    @classmethod
    def klass(cls):
        return "klass"


def plain(x):
    return x + 1


async def coroutine():
    return "coroutine"


def never():
    return "never"


answer = 42
"""

# Commands on stdin, one a line; "spawn" calls `plain` in a spawned child. Prints `ok`.
MAIN = """
import asyncio, multiprocessing, sys
import target

def child():
    target.plain(1)

if __name__ == "__main__":
    for line in sys.stdin:
        word = line.strip()
        if word == "plain":
            assert target.plain(1) == 2
        elif word == "method":
            assert target.Runner().method() == "method"
            assert target.Runner.static() == "static" and target.Runner.klass() == "klass"
        elif word == "coroutine":
            assert asyncio.iscoroutinefunction(target.coroutine)
            assert asyncio.run(target.coroutine()) == "coroutine"
        elif word == "spawn":
            process = multiprocessing.get_context("spawn").Process(target=child)
            process.start()
            process.join()
        elif word == "modules":
            print(sorted(m for m in sys.modules if m.startswith("kl_bitexact")), flush=True)
            continue
        print("ok", flush=True)
"""

NAMES = (
    "target:plain",
    "target:Runner.__init__",
    "target:Runner.method",
    "target:Runner.static",
    "target:Runner.klass",
    "target:coroutine",
    "target:never",
    "target:answer",
    "target:Missing.method",
    "elsewhere:function",
)


class Program:
    """The probed interpreter, driven a command at a time."""

    def __init__(self, python: str, tmp_path: Path, probe: Probe, extra: str = "") -> None:
        (tmp_path / "target.py").write_text(textwrap.dedent(TARGET))
        (tmp_path / "main.py").write_text(textwrap.dedent(MAIN))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), extra) if p)
        self.process = subprocess.Popen(
            [python, str(tmp_path / "main.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=probe.environment(env),
            cwd=tmp_path,
        )

    def say(self, word: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


@pytest.mark.parametrize("python", interpreters())
def test_each_test_sees_the_functions_it_ran_in_every_process(python, tmp_path):
    probe = Probe(tmp_path / "reach", "suite", NAMES)
    program = Program(python, tmp_path, probe)
    try:
        numbers = {}
        for word in ("plain", "method", "coroutine", "spawn"):
            numbers[word] = probe.begin()
            assert program.say(word) == "ok"
        assert program.say("modules") == "[]"  # the probe imports nothing of kl_bitexact
    finally:
        program.close()
        probe.close()
    ran = {
        word: {f.name for f in probe.reach(number, NAMES).functions if f.when is RanWhen.TEST}
        for word, number in numbers.items()
    }
    assert ran["plain"] == {"target:plain"}
    assert ran["method"] == {
        "target:Runner.__init__",
        "target:Runner.method",
        "target:Runner.static",
        "target:Runner.klass",
    }
    assert ran["coroutine"] == {"target:coroutine"}
    assert ran["spawn"] == {"target:plain"}  # in the spawned child only
    logs = sorted((tmp_path / "reach").glob("*/hits-*.log"))
    spawned = [log for log in logs if "hit\t4\ttarget:plain" in log.read_text()]
    assert len(spawned) == 1 and "multiprocessing" in spawned[0].read_text()
    notes = {f.name: f.note for f in probe.reach(numbers["plain"], NAMES).functions}
    assert notes["target:never"] == ""
    assert notes["target:answer"] == "answer is a int, not a Python function"
    assert notes["target:Missing.method"] == "target has no Missing"
    assert notes["elsewhere:function"] == "no process of the server imported elsewhere"


def test_a_sitecustomize_the_probe_shadows_still_runs(tmp_path):
    shadowed = tmp_path / "site"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    probe = Probe(tmp_path / "reach", "suite", ("target:plain",))
    env = probe.environment({**os.environ, "PYTHONPATH": str(shadowed)})
    check = "import builtins, sys; print(getattr(builtins, 'SHADOWED_RAN', False))"
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
    probe.close()
    assert done.stdout.strip() == "True", done.stderr
    assert env["PYTHONPATH"].endswith(os.pathsep + str(shadowed))


def test_a_process_that_skips_sitecustomize_is_no_measurement(tmp_path):
    probe = Probe(tmp_path / "reach", "suite", ("target:plain",))
    env = probe.environment(dict(os.environ))
    subprocess.run([sys.executable, "-S", "-c", "pass"], env=env, check=True)
    reach = probe.reach(probe.begin(), ("target:plain",))
    probe.close()
    assert not reach.measured and reach.why_not == hits.NO_PROCESS
    assert [f.ran for f in reach.unreached] == [False]


def test_what_the_server_writes_is_read_by_its_shape_only(tmp_path):
    observed = hits.Observed()
    asked = frozenset({"m:f"})
    for line in (
        "start\t12\t3.11\tpython",
        "hit\t1\tm:f",
        "hit\t1\tm:other",  # not asked: ignored
        "hit\tx\tm:f",
        "hit\t2",
        "installed\tm:g",
        "missing\tm:f",
        "\t\t\t",
        "garbage",
    ):
        observed.take(line, asked)
    assert observed.processes == {12}
    assert observed.hits == {1: {"m:f"}}
    assert observed.installed == set() and observed.missing == {}
    reach = hits.reach_of(observed, (1,), ("m:f",))
    assert reach.measured and reach.functions[0].ran


def test_a_probe_error_in_the_server_is_no_measurement():
    observed = hits.Observed()
    observed.take("start\t1\t3.11\tpython", frozenset())
    observed.take("error\tOSError: no epoch", frozenset())
    reach = hits.reach_of(observed, (1,), ("m:f",))
    assert not reach.measured
    assert reach.why_not == "the probe failed in the server: OSError: no epoch"


def test_the_probes_import_contract_names_every_module_of_kl_bitexact():
    """lint-imports cannot forbid the root package; the contract lists every other module,
    and this keeps the list whole as packages are added."""
    import pkgutil
    import re

    import kl_bitexact

    root = Path(kl_bitexact.__file__).parent
    text = (root.parents[1] / "pyproject.toml").read_text()
    block = text.split('source_modules = ["kl_bitexact.reach.probe"]', 1)[1].split("]", 1)[0]
    ours = set(re.findall(r'"(kl_bitexact\.[\w.]+)"', block))
    top = {f"kl_bitexact.{m.name}" for m in pkgutil.iter_modules([str(root)])}
    reach = {f"kl_bitexact.reach.{m.name}" for m in pkgutil.iter_modules([str(root / "reach")])}
    assert ours == (top - {"kl_bitexact.reach", "kl_bitexact.__main__"}) | (
        reach - {"kl_bitexact.reach.probe"}
    )


# --- the verdict: a named function that never ran, or reach not measured, is never a pass


function_reach = st.builds(
    FunctionReach,
    name=st.sampled_from(["m:f", "m:C.g", "pkg.mod:h"]),
    ran=st.booleans(),
    when=st.sampled_from(list(RanWhen)),
    note=st.sampled_from(["", "m has no g"]),
)


@given(
    measured=st.booleans(),
    functions=st.lists(function_reach, max_size=4).map(tuple),
    changed=st.lists(function_reach, max_size=3).map(tuple),
    status=st.sampled_from(list(Status)),
)
def test_a_test_is_a_pass_only_when_every_function_it_names_ran(
    measured, functions, changed, status
):
    reach = Reach(measured, functions, "" if measured else "why", changed)
    test = TestResult("s::t", "match", status, reach=reach)
    judged = verdict.exercised(test)
    every_one_ran = measured and all(f.ran for f in functions)
    if judged.status is Status.PASSED:
        assert every_one_ran or not functions  # the PR's changed functions are no claim
    if status in verdict.CLAIMS and functions and not every_one_ran:
        assert judged.status is Status.NOT_EXERCISED
        assert judged.message.startswith("not exercised (the test did not test what it claims)")
    if status not in verdict.CLAIMS:
        assert judged == test  # a test that measured nothing says so itself


def test_the_reasons_name_each_function_or_why_nothing_was_measured():
    ran = FunctionReach("m:f", True, RanWhen.STARTUP)
    missing = FunctionReach("m:g", False, note="m has no g")
    never = FunctionReach("m:h", False)
    assert verdict.unreached(Reach(True, (ran, missing, never))) == [
        "m:g never ran (m has no g)",
        "m:h never ran",
    ]
    assert verdict.unreached(Reach(False, (never,), hits.NO_PROCESS)) == [
        f"reach not measured: {hits.NO_PROCESS}"
    ]
    assert verdict.unreached(Reach(False, (never,), NOT_LAUNCHED)) == [NOT_LAUNCHED]
    assert verdict.unreached(Reach(False, (), NOT_LAUNCHED)) == []  # names nothing
    assert verdict.unreached(None) == []

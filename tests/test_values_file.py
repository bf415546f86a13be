"""A command's options as a file of values (commands/values_file.py) and
`kl-bitexact --values FILE`: how the action's run step hands `run` and `pytest` their work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kl_bitexact import cli
from kl_bitexact.commands import pytest_cmd, run, values_file
from kl_bitexact.compare.gate import FailOn, FailOnChoice
from kl_bitexact.errors import ConfigError
from kl_bitexact.reference.faults import Fault
from kl_bitexact.suite.model import Gate

EVERY_RUN_FIELD = run.Options(
    suites=(Path("a.yaml"), Path("b dir/c.yaml")),
    out=Path("out"),
    base_url="http://127.0.0.1:1",
    select=("decode", "t?"),
    exact=True,
    gate=Gate.NOISE_FLOOR,
    repeat=3,
    prove_base=Path("../base"),
    relaunch=True,
    faults=(Fault.BRANCH_CHECKPOINT_REUSE,),
    fail_on=FailOnChoice(FailOn.FAILURE, flaky=True, allow_known=True),
    print_comment=True,
    color="never",
    quiet=True,
)


def _round_trip(tmp_path: Path, command: str, options: object, options_type: type) -> object:
    path = tmp_path / "values.json"
    path.write_bytes(values_file.encode(command, options))
    values = values_file.read(path)
    assert values.command == command
    return values_file.options(path, values, options_type)


@pytest.mark.parametrize("options", [run.Options(), EVERY_RUN_FIELD], ids=["defaults", "every"])
def test_run_options_come_back_as_they_went(tmp_path, options):
    assert _round_trip(tmp_path, "run", options, run.Options) == options


def test_pytest_options_come_back_as_they_went(tmp_path):
    options = pytest_cmd.Options(
        pytest_args=("t/test_x.py", "-k", "decode"),
        out=Path("o"),
        min_cache_hit_ratio=0.5,
        prove_base=Path("b"),
        prove_pythonpath=("python",),
        exact=True,
        python="/opt/engine/bin/python3",
    )
    assert _round_trip(tmp_path, "pytest", options, pytest_cmd.Options) == options


def test_the_log_line_shows_what_differs_from_the_defaults():
    line = values_file.describe("run", run.Options(suites=(Path("a.yaml"),), exact=True))
    assert line == "kl-bitexact run (suites=a.yaml, exact=True; values handed over in a file)"
    assert "defaults" in values_file.describe("run", run.Options())
    described = values_file.describe("run", EVERY_RUN_FIELD)
    assert "gate=noise-floor" in described and "fail_on=failure,flaky,allow-known" in described


def _values(tmp_path: Path, command: str, options: dict[str, object]) -> Path:
    path = tmp_path / "values.json"
    path.write_text(json.dumps({"command": command, "options": options}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"repeat": "two"}, "$.repeat"),
        ({"gate": "sometimes"}, "$.gate"),
        ({"fail_on": {"mode": "always"}}, "$.fail_on.mode"),
        ({"suites": "a.yaml"}, "$.suites"),
    ],
)
def test_a_wrong_value_is_named(tmp_path, options, named):
    path = _values(tmp_path, "run", options)
    with pytest.raises(
        ConfigError, match=f"not a kl-bitexact values file .*{named.replace('$', '[$]')}"
    ):
        values_file.options(path, values_file.read(path), run.Options)


def test_a_file_that_is_not_one_says_so(tmp_path):
    path = tmp_path / "values.json"
    path.write_text('["run"]', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"values\.json: not a kl-bitexact values file"):
        values_file.read(path)


def test_values_run_a_command_from_the_cli(tmp_path, capsys, monkeypatch):
    """`--values FILE` does the command's work with the file's options: here `run` of the
    bundled suite with a selection that matches nothing, the usage error run itself gives."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    options = run.Options(out=tmp_path / "out", select=("no-such-test",))
    path = tmp_path / "run.json"
    path.write_bytes(values_file.encode("run", options))
    assert cli.main([values_file.FLAG, str(path)]) == 2
    assert "--select no-such-test matched no test" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["missing.json"], "cannot read the values file"),
        (["a.json", "b.json"], "--values takes one file and nothing else"),
    ],
)
def test_values_usage_errors_exit_2(tmp_path, capsys, monkeypatch, words, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        cli.main([values_file.FLAG, *words])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_only_commands_with_options_take_a_values_file(tmp_path, capsys):
    path = _values(tmp_path, "report", {})
    with pytest.raises(SystemExit) as stopped:
        cli.main([values_file.FLAG, str(path)])
    assert stopped.value.code == 2
    assert "no command 'report' takes a values file" in capsys.readouterr().err


def test_a_child_run_from_values_writes_results(tmp_path, cli):
    """The real thing, as the action's run step starts it: a process, the bundled suite."""
    options = run.Options(out=tmp_path / "out", select=("reference-radix::match",), quiet=True)
    path = tmp_path / "run.json"
    path.write_bytes(values_file.encode("run", options))
    done = cli([values_file.FLAG, str(path)])
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    [suite] = results["suites"]
    assert [test["id"] for test in suite["tests"]] == ["reference-radix::match"]


# --- issue 36, items 7-9: as strict as the command line, each refusal exit 2 naming the key --


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, raw: str) -> str:
    path = tmp_path / "values.json"
    path.write_text(raw, encoding="utf-8")
    code: str | int | None
    try:
        code = cli.main([values_file.FLAG, str(path)])
    except SystemExit as stopped:
        code = stopped.code
    assert code == 2, capsys.readouterr()
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "options", "named"),
    [
        ("run", {"repeats": 2}, "unknown key `repeats`"),
        ("run", {"fail_on": {"mode": "failure", "strict": True}}, "unknown key `fail_on.strict`"),
        ("run", {"color": "purple"}, "`color`: 'purple' is not one of auto, always, never"),
        (
            "pytest",
            {"min_cache_hit_ratio": -5.0},
            "`min_cache_hit_ratio`: -5.0 is not between 0 and 1",
        ),
        ("run", {"suites": ["a\u0000.yaml"]}, "`suites[0]` holds a NUL character"),
        ("pytest", {"pytest_args": ["-k", "x\u0000"]}, "`pytest_args[1]` holds a NUL character"),
        ("run", {"out": "o\u0000ut"}, "`out` holds a NUL character"),
    ],
)
def test_a_values_file_is_as_strict_as_the_command_line(tmp_path, capsys, command, options, named):
    raw = json.dumps({"command": command, "options": options})
    err = _refused(tmp_path, capsys, command, raw)
    assert named in err and "Traceback" not in err


def test_a_values_file_nested_100000_deep_is_refused_by_its_depth(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    err = _refused(
        tmp_path, capsys, "run", '{"command": "run", "options": {"select": ' + deep + "}}"
    )
    assert "nested more than 64 levels deep" in err and "Traceback" not in err

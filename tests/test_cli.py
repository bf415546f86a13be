"""The CLI as a user meets it: help, version, exit codes, and no tracebacks for mistakes."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from import_probe import heavy_in, modules_after

from kl_bitexact import __version__, cli
from kl_bitexact.commands import Command

SUBCOMMANDS = [
    "run",
    "serve-reference",
    "explore",
    "report",
    "publish",
    "history",
    "lint-ci",
    "shard",
    "prove-plan",
    "pytest",
    "import-junit",
    "action",
]


def test_help_lists_every_subcommand_and_exit_codes(cli):
    result = cli(["--help"])
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout
    assert "130" in result.stdout and "internal error" in result.stdout


def test_version(cli):
    result = cli(["--version"])
    assert result.returncode == 0
    assert result.stdout.strip() == f"kl-bitexact {__version__}"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(cli, name):
    result = cli([name, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kl-bitexact " + name)


def test_command_table_matches_contract():
    assert [command.name for command in cli.COMMANDS] == SUBCOMMANDS


def test_unknown_option_is_exit_2_without_traceback(cli):
    result = cli(["run", "--no-such-option"])
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-option" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_subcommand_is_exit_2(cli):
    result = cli([])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def _install(monkeypatch, handler):
    command = Command("boom", "s", "d", lambda parser: None, handler)
    monkeypatch.setattr(cli, "COMMANDS", (command,))


def test_internal_error_is_exit_3_with_crash_log(monkeypatch, tmp_path, capsys):
    def handler(args: argparse.Namespace) -> int:
        raise RuntimeError("kaboom")

    _install(monkeypatch, handler)
    monkeypatch.setenv("KL_BITEXACT_LOG_DIR", str(tmp_path))
    assert cli.main(["boom"]) == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: kaboom" in err
    assert "please report" in err.lower()
    assert "Traceback" not in err
    logs = list(tmp_path.glob("kl-bitexact-crash-*.log"))
    assert len(logs) == 1
    assert "Traceback" in logs[0].read_text() and "kaboom" in logs[0].read_text()


def test_ctrl_c_is_exit_130(monkeypatch, capsys):
    def handler(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    _install(monkeypatch, handler)
    assert cli.main(["boom"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_fatal_error_prints_message_and_hint(monkeypatch, capsys):
    from kl_bitexact.errors import ConfigError

    def handler(args: argparse.Namespace) -> int:
        raise ConfigError("suite.yaml: tests[0].samples: must be positive", hint="set samples: 32")

    _install(monkeypatch, handler)
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "kl-bitexact: error: suite.yaml: tests[0].samples: must be positive\n"
        "  hint: set samples: 32\n"
    )


def test_handler_return_value_is_the_exit_code(monkeypatch):
    _install(monkeypatch, lambda args: 1)
    assert cli.main(["boom"]) == 1


def test_module_and_console_script_agree(cli):
    script = Path(sys.executable).parent / "kl-bitexact"
    assert script.exists(), "console script missing: install the package with pip"
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert out.stdout == cli(["--version"]).stdout


def test_lazy_table_matches_each_command_module():
    """The table's names and summaries (shown by --help without loading any command
    module) are the ones each module declares."""
    for entry in cli.COMMANDS:
        assert isinstance(entry, cli.LazyCommand)
        command = entry.load()
        assert (command.name, command.summary) == (entry.name, entry.summary)


def main_code(argv: list[str]) -> str:
    """A snippet running the CLI in-process (argparse exits on --help and --version)."""
    return f"from kl_bitexact import cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit: pass"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_start_up_loads_no_command_and_nothing_heavy(argv):
    code = (
        f"from kl_bitexact import cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit:\n    pass"
    )
    modules = modules_after(code)
    assert heavy_in(modules) == []
    assert sorted(m for m in modules if m.startswith("kl_bitexact.commands.")) == []


def test_a_command_loads_only_its_own_module():
    modules = modules_after(main_code(["report", "--help"]))
    assert "kl_bitexact.commands.report" in modules
    assert "kl_bitexact.commands.run" not in modules
    # `report --help` is argparse and the report's arguments (issue 40: it imported the
    # whole compare and render stack, 0.17 s of CPU, ten times --version): the work's
    # modules load when the work starts.
    assert heavy_in(modules) == []
    ours = {m for m in modules if m.startswith("kl_bitexact.") and "." in m[len("kl_bitexact.") :]}
    assert sorted(ours) == [
        "kl_bitexact.commands.arguments",
        "kl_bitexact.commands.handlers",
        "kl_bitexact.commands.report",
        "kl_bitexact.compare.history_limits",
        "kl_bitexact.report.marker",
    ]
    # Nor the standard library's costly modules the work needs: dataclasses (its inspect
    # was a fifth of that help's CPU), pathlib, typing, shutil (three compression modules).
    assert sorted(modules & {"dataclasses", "inspect", "pathlib", "typing", "shutil"}) == []


def test_the_process_leaves_its_objects_to_reference_counts_at_exit(tmp_path):
    """As a process (no argv), main freezes the heap once the command is done: the
    collector's passes at exit would only walk what the imports made (a tenth of a small
    run's CPU). Called in-process (argv given) it leaves the caller's collector alone."""
    import gc

    from golden_scenarios import check_result, results

    from kl_bitexact.results import io as results_io

    head = tmp_path / "head.json"
    results_io.write_atomic(results(check_result("a")), head)
    argv = ["report", str(head), "--out", str(tmp_path / "comment.md")]
    before = gc.get_freeze_count()
    assert cli.main(argv) == 0
    assert gc.get_freeze_count() == before
    code = (
        "import gc, sys\nfrom kl_bitexact import cli\n"
        f"sys.argv = ['kl-bitexact', *{argv!r}]\n"
        "print(cli.main(), gc.get_freeze_count() > 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.split() == ["0", "True"], done.stderr


def test_run_loads_no_other_engine_check_or_command_helper():
    """A run against sglang pays for sglang's adapter and the checks' common code only:
    the OpenAI-compatible adapters, multi-turn flows, change detection (--prove-base), the
    findings file and the other commands' helpers load when a suite or option needs them.
    numpy loads only for seeded prompts or a sample that is not bit-exact, and sglang's
    adapter talks http.client, not requests (issue 40: 0.2 s of a run's CPU each, where
    sglang's helpers spend 0.5 s in all)."""
    modules = modules_after(main_code(["run", "--help"]))
    assert "kl_bitexact.run.engines.sglang" in modules
    assert not {"numpy", "requests", "urllib3"} & {name.split(".")[0] for name in modules}
    unneeded = {
        "kl_bitexact.run.engines.openai",
        "kl_bitexact.run.engines.vllm",
        "kl_bitexact.run.engines.llamacpp",
        "kl_bitexact.run.checks.multiturn",
        "kl_bitexact.run.checks.pressure_restore",
        "kl_bitexact.suite.changes",
        "kl_bitexact.registry.findings_file",
        "kl_bitexact.commands.arguments",
        "kl_bitexact.commands.input_files",
        "kl_bitexact.commands.junit_import",
        "kl_bitexact.action.proof_jobs",
    }
    assert sorted(unneeded & modules) == []


def test_history_offline_loads_no_github_client():
    """`history --history-dir` (and report's) reads files: PyGithub and requests load only
    when a history is fetched."""
    modules = modules_after(main_code(["history", "--help"]))
    assert "kl_bitexact.commands.history" in modules
    assert not {"github", "requests"} & {name.split(".")[0] for name in modules}


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_help_fits_a_100_column_terminal(command: str, monkeypatch, capsys):
    # Descriptions were single lines of 150-240 characters; the fault list of
    # serve-reference too (issue 27).
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert text.count("\n") > 5
    assert [line for line in text.splitlines() if len(line) > 100] == []

"""A server that fails to start is reported once per server, with why on the first line,
the log's tail and the failing argument when the server's own error names one; a server
nobody answers at is refused, unresolvable, silent or unwell, each with its own hint
(issue 27: a typo in a server argument printed its usage once per test, 86 lines, and the
summary ended at "last log lines:"; an unreachable URL hinted at startup_timeout and a log
that does not exist, once per test)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fake_suites import FAKE

from kl_bitexact.run import startup_failure

TEST = (
    "{name: %s, check: match, samples: 2, prompt_tokens: [8, 16], max_new_tokens: 4, "
    "vocab_size: 64}"
)


def suite(tmp_path: Path, server: str, tests: tuple[str, ...] = ("a", "b", "c")) -> Path:
    path = tmp_path / "suite.yaml"
    listed = ", ".join(TEST % name for name in tests)
    path.write_text(f"name: typo\nserver: {server}\ntests: [{listed}]\n")
    return path


def messages(out: Path) -> list[str]:
    document = json.loads((out / "results.json").read_text())
    return [t["message"] for s in document["suites"] for t in s["tests"]]


def test_a_misspelt_reference_flag_is_told_once_with_the_flag_it_meant(cli, tmp_path):
    server = "{engine: reference, args: [--enable-deterministic-inferense]}"
    out = tmp_path / "out"
    done = cli(["run", str(suite(tmp_path, server)), "--out", str(out)])
    assert done.returncode == 2, done.stderr
    text = done.stdout
    assert text.count("usage:") == 1, text  # the log's tail, once (was once per test)
    assert text.count("  hint: ") == 1, text
    said = (
        "suite typo: the server exited with code 2: kl-bitexact serve-reference: error: "
        "unrecognized arguments: --enable-deterministic-inferense "
        "(did you mean '--enable-deterministic-inference'?)"
    )
    assert said in text.splitlines()
    assert (
        "  hint: the server refused its argument --enable-deterministic-inferense (did you "
        "mean '--enable-deterministic-inference'?): fix server.args or server.command" in text
    )
    # ... in which file: the suite's own (a run of many files names the one to edit).
    assert f"fix server.args or server.command in {suite(tmp_path, server)}" in text
    assert [line for line in text.splitlines() if "did not run" in line] == [
        f"  ERROR    typo::{name}  did not run: no server" for name in "abc"
    ]
    # The summary: one line for the three, why on it (it ended at "last log lines:").
    assert f"  could not run  typo::a and 2 more tests: {said}" in text.splitlines()
    # results.json keeps each test's whole story, the log's tail included.
    assert all(m.startswith(said) and "last lines of" in m for m in messages(out))


def test_another_server_s_misspelt_flag_is_matched_against_its_usage_text(cli, tmp_path):
    command = json.dumps([sys.executable, str(FAKE), "--port", "{port}", "--page-sise", "4"])
    done = cli(["run", str(suite(tmp_path, f"{{engine: sglang, command: {command}}}"))])
    assert done.returncode == 2
    assert (
        "hint: the server refused its argument --page-sise (did you mean '--page-size'?)"
        in done.stdout
    ), done.stdout


def test_a_server_that_exits_with_an_empty_log_says_so(tmp_path):
    lines: list[str] = []
    assert startup_failure.telling_line(lines) == ""
    assert startup_failure.argument_hint(lines) is None


def test_the_telling_line_is_the_server_s_last_error_never_ours():
    log = [
        "$ python -m engine --port 1 --tp 9",
        "loading weights",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "ValueError: tp_size 9 does not divide 8 GPUs",
        "[kl-bitexact] stopping the server: it did not start",
    ]
    assert startup_failure.telling_line(log) == "ValueError: tp_size 9 does not divide 8 GPUs"
    assert startup_failure.telling_line(["starting", "\x1b[2Jready?"]) == "ready?"


def test_arguments_are_read_from_argparse_and_llama_cpp_errors():
    argparse_type = [
        "usage: x [--page-size N]",
        "x: error: argument --page-size: invalid int value: 'a'",
    ]
    assert startup_failure.failing_argument(argparse_type) == "--page-size"
    llama = ["error: invalid argument: --ctx-sise", "usage: llama-server [--ctx-size N]"]
    assert startup_failure.argument_hint(llama) == (
        "the server refused its argument --ctx-sise (did you mean '--ctx-size'?)"
    )
    # The command line echoed at the top of the log is not a usage text to match against.
    ours = ["$ engine --fualt", "engine: error: unrecognized arguments: --fualt"]
    assert startup_failure.argument_hint(ours) == "the server refused its argument --fualt"

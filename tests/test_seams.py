"""The seams between the action, the commands and GitHub carry typed values (issue 29):

- no command line is rebuilt from parsed values in `action/` or `commands/` (a child
  process gets a file of values, commands/values_file.py), and no regular expression reads
  a command's output there;
- the GitHub token is a parameter of one function only, where the session is built.

Read from the sources (ast), so a new function or module is held to it as it lands."""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

import kl_bitexact
from kl_bitexact import cli

SOURCE = Path(kl_bitexact.__file__).parent
SEAM_FOLDERS = ("action", "commands")

# Command lines that are not rebuilt from parsed values, and why.
NOT_REBUILT = {
    # The action's step restarting itself without credentials: its inputs go through an
    # unlinked file (the descriptor), the one word is where.
    ("commands/action.py", ("action", "--inputs-fd")),
    # `run --fault NAME` appends the fault to the suite's own server command (the user's
    # text, run as written), not to a command of ours.
    ("commands/run.py", ("--fault",)),
    # `pytest`'s command to run one failing test again: text for a reader (results.json's
    # suites[].rerun, shown in the comment), never run by kl-bitexact.
    ("commands/pytest_cmd.py", ("--python",)),
    ("commands/pytest_cmd.py", ("--exact",)),
}


def _commands_and_options() -> tuple[set[str], set[str]]:
    names: set[str] = set()
    options: set[str] = set()
    for action in cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names.add(name)
                for option in sub._actions:
                    options |= {word for word in option.option_strings if word.startswith("--")}
    return names, options - {"--help"}


def _seam_modules() -> Iterator[tuple[str, ast.Module]]:
    for folder in SEAM_FOLDERS:
        for path in sorted((SOURCE / folder).glob("*.py")):
            yield f"{folder}/{path.name}", ast.parse(path.read_text(encoding="utf-8"))


def _words(node: ast.List | ast.Tuple) -> tuple[str, ...]:
    return tuple(
        element.value
        for element in node.elts
        if isinstance(element, ast.Constant) and isinstance(element.value, str)
    )


def command_lines_built() -> list[tuple[str, tuple[str, ...]]]:
    """Every list or tuple display in the seam folders that reads as a kl-bitexact command
    line: a command's name and more, or one of the commands' options."""
    names, options = _commands_and_options()
    found = []
    for module, tree in _seam_modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.List | ast.Tuple):
                continue
            words = _words(node)
            names_a_command = len(node.elts) > 1 and words[:1] and words[0] in names
            if names_a_command or set(words) & options:
                found.append((module, words))
    return found


def test_no_command_line_is_rebuilt_from_parsed_values():
    unexplained = [built for built in command_lines_built() if built not in NOT_REBUILT]
    assert unexplained == []


def test_the_check_finds_a_rebuilt_command_line(tmp_path, monkeypatch):
    """The rule above can fail: the command line the action built before (action/argv.py)."""
    rebuilt = tmp_path / "action"
    rebuilt.mkdir()
    (rebuilt / "argv.py").write_text(
        'def run_argv(out):\n    return ["run", "--out", str(out)]\n', encoding="utf-8"
    )
    monkeypatch.setattr(__name__ + ".SOURCE", tmp_path)
    assert command_lines_built() == [("action/argv.py", ("run", "--out"))]


def test_a_child_kl_bitexact_gets_a_values_file():
    """`python -m kl_bitexact ...` in the seam folders is only ever the values file's flag
    (or the step's clean restart, which goes through clean_env)."""
    for module, tree in _seam_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.List) and "kl_bitexact" in _words(node):
                flag = [
                    element
                    for element in node.elts
                    if isinstance(element, ast.Attribute) and element.attr == "FLAG"
                ]
                assert flag, f"{module}:{node.lineno}: a child kl-bitexact without --values"


def test_no_regular_expression_reads_a_command_s_output():
    """publish, report, lint-ci, shard and prove-plan return values to the action, and run
    and pytest a results file: the step (the one module that calls the commands) reads no
    printed text, so no wording of a print can silently break the action."""
    tree = ast.parse((SOURCE / "commands" / "action.py").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "re" not in imported | modules


# The functions that take the GitHub token: where the session (token, redaction) is built,
# and the two clients only the session builds from it (`Session.client`, `Session.rest`).
# The local GitHub of the tests (testing/) is the server side.
TOKEN_TAKERS = {
    ("publish/client.py", "connect"),
    ("publish/pygithub_client.py", "github_client"),
    ("publish/rest.py", "__init__"),
}


def token_parameters() -> set[tuple[str, str]]:
    """(module, function) of every function with a text parameter named for a token."""
    found = set()
    for path in sorted(SOURCE.rglob("*.py")):
        module = path.relative_to(SOURCE).as_posix()
        if module.startswith("testing/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            parameters = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for parameter in parameters:
                annotation = ast.unparse(parameter.annotation) if parameter.annotation else ""
                if parameter.arg.endswith("token") and "int" not in annotation:
                    found.add((module, node.name))
    return found


def test_only_the_session_takes_the_token():
    assert token_parameters() == TOKEN_TAKERS

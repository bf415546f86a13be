"""Find the scripts a `run:` block starts, with their arguments as the shell would pass
them (pure).

GitHub substitutes `${{ }}` before the shell runs, so the caller does that first; this
module then follows the shell: `\\` continuations, `;`/`&&`/`||`/`|` separated commands,
`cd DIR`, `VAR=value` and `export VAR=value` assignments, and `$VAR` / `${VAR}` / `"$VAR"`
expansion from those assignments and the step's environment. A value it cannot know is
kept as a marker so the caller can report it instead of taking it for a literal.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

# Marks text whose value is unknown (an unresolved `${{ }}` or shell variable).
UNKNOWN_MARK = "\x00"
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}", "!"}
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?$")


@dataclass(frozen=True)
class Invocation:
    """One command that runs a Python script."""

    script: str  # normalized path, relative to the repository root when it can tell
    args: tuple[str, ...]
    line: int  # 0-based line of the script where the command starts


def invocations(script: str, env: Mapping[str, str], cwd: str = "") -> list[Invocation]:
    # The checkout is the working directory a step starts in.
    variables = {"GITHUB_WORKSPACE": ".", **env}
    found: list[Invocation] = []
    directory = cwd
    for line, text in _logical_lines(script):
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError:
            continue  # unbalanced quotes: not something to guess about
        for command in _commands(tokens):
            directory = _run(command, variables, directory, line, found)
    return found


def _logical_lines(script: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for index, text in enumerate(script.splitlines()):
        start, before = pending if pending else (index, "")
        joined = before + text
        if joined.endswith("\\"):
            pending = (start, joined[:-1] + " ")
            continue
        pending = None
        lines.append((start, joined))
    if pending:
        lines.append(pending)
    return lines


def _commands(tokens: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS or set(token) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def _run(
    command: list[str],
    variables: dict[str, str],
    directory: str,
    line: int,
    found: list[Invocation],
) -> str:
    """Apply one simple command; returns the working directory after it."""
    words = list(command)
    if words[0] == "export":
        words = words[1:]
    assignments = []
    while words and _ASSIGNMENT.match(words[0]):
        assignments.append(words.pop(0))
    if not words:
        for assignment in assignments:  # `VAR=value` alone sets a shell variable
            name, _, value = assignment.partition("=")
            variables[name] = expand(value, variables)
        return directory
    words = [expand(word, variables) for word in words]
    if words[0] == "cd" and len(words) > 1:
        return _cd(directory, words[1])
    script_at = _script_index(words)
    if script_at is not None:
        path = _normalize(directory, words[script_at])
        found.append(Invocation(path, tuple(words[script_at + 1 :]), line))
    return directory


def expand(word: str, variables: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        return UNKNOWN_MARK + match.group(0) + UNKNOWN_MARK

    return _VARIABLE.sub(replace, word)


def _cd(directory: str, target: str) -> str:
    if UNKNOWN_MARK in target:
        return UNKNOWN_MARK
    target = _strip_workspace(target)
    if target.startswith("/"):
        return UNKNOWN_MARK  # outside the checkout: nothing there is the suite runner
    if directory == UNKNOWN_MARK:
        return directory
    return posixpath.normpath(posixpath.join(directory, target))


def _script_index(words: list[str]) -> int | None:
    """Index of the script a command runs: `X.py ...`, `python3 [-u] X.py ...`."""
    if words[0].endswith(".py"):
        return 0
    if _PYTHON.match(posixpath.basename(words[0])):
        for index in range(1, len(words)):
            if words[index] == "-m":
                return None
            if not words[index].startswith("-"):
                return index if words[index].endswith(".py") else None
    return None


def _normalize(directory: str, script: str) -> str:
    script = _strip_workspace(script)
    if UNKNOWN_MARK in directory or UNKNOWN_MARK in script or script.startswith("/"):
        return UNKNOWN_MARK + script
    return posixpath.normpath(posixpath.join(directory, script))


def _strip_workspace(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path

"""What a wrapper script does with its arguments, read from its text (pure).

CI often starts the suite runner through a script of its own, e.g. sglang's AMD jobs:
`bash scripts/ci/amd/amd_ci_exec.sh -w /sglang-checkout/test python3 run_suite.py ...`,
whose body parses `-w DIR` / `-e K=V` in a `while ... case "$1" in` loop and then runs
`docker exec -w "$WORKDIR" ... ci_sglang "$@"`. To follow the command as the shell would,
this module reads such a body: the options its `case` loop takes (which take a value, which
variable each sets, which end the options), the top-level variable defaults, and every
command that passes the remaining arguments on (`"$@"`). A body it cannot read that way
(no command runs `"$@"`, options parsed by `getopts`) is a reason, never a guess.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

POSITIONAL = ("$@", "${@}", "$*", "${*}")
_CASE = re.compile(r"\bcase\s+\"?\$\{?1\}?\"?\s+in\b")
_ESAC = re.compile(r"^\s*esac\b")
_ITEM = re.compile(r"^\s*\(?\s*([^()\s][^()]*?)\s*\)\s*(.*)$")
_SETS_VALUE = re.compile(r"\b([A-Za-z_]\w*)=\"?\$(?:\{2\}|2)\"?")
_SETS_ATTACHED = re.compile(r"\b([A-Za-z_]\w*)=\"?\$\{1#\*=\}\"?")
_DEFAULT = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
_ARRAY = re.compile(r"^\$\{\w+\[[@*]\]\}$")
_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "exec", "command"}


@dataclass(frozen=True)
class Option:
    takes_value: bool = False
    attached: bool = False  # `--name=VALUE` in one word
    variable: str | None = None  # the variable the value is assigned to
    ends_options: bool = False  # `--`: what follows is the command


@dataclass(frozen=True)
class Wrapper:
    """A script that runs its remaining arguments as a command."""

    options: dict[str, Option]
    stops_at_other: bool  # `*) break`: the first other word starts the command
    defaults: dict[str, str]
    # per line passing "$@" on: its commands up to that one (a `cd DIR &&` before it counts)
    commands: tuple[tuple[tuple[str, ...], ...], ...]

    def apply(self, args: list[str]) -> tuple[dict[str, str], list[str]]:
        """(variables the options set over the defaults, the command's words)."""
        variables = dict(self.defaults)
        index = 0
        while index < len(args):
            word = args[index]
            name, equals, value = word.partition("=")
            option = self.options.get(word) or self.options.get(f"{name}=*")
            if option is None:
                if self.stops_at_other or not word.startswith("-"):
                    break
                index += 1  # a flag the loop ignores
                continue
            index += 1
            if option.ends_options:
                break
            if option.attached and equals:
                given = value
            elif option.takes_value and index < len(args):
                given = args[index]
                index += 1
            else:
                continue
            if option.variable:
                variables[option.variable] = given
        return variables, args[index:]


@functools.lru_cache(maxsize=64)
def read(text: str) -> Wrapper | str:
    """The wrapper `text` describes, or why it cannot be read as one (the same script is
    started by many steps: read once)."""
    if re.search(r"\bgetopts?\b", text):
        return "its options are parsed by getopts, which lint-ci does not follow"
    lines = _logical_lines(text)
    options, stops = _options(lines)
    commands = tuple(found for line in lines if (found := _passing_on(line)))
    if not commands:
        return 'no command in it runs its arguments ("$@")'
    return Wrapper(options, stops, _defaults(lines), commands)


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        out.append(pending + raw)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _options(lines: list[str]) -> tuple[dict[str, Option], bool]:
    """The options of the first `case "$1" in ... esac` block."""
    start = next((i for i, line in enumerate(lines) if _CASE.search(line)), None)
    if start is None:
        return {}, True  # no option loop: every argument is the command
    options: dict[str, Option] = {}
    stops = False
    patterns: list[str] = []
    body: list[str] = []
    for line in lines[start + 1 :]:
        if _ESAC.match(line):
            break
        item = _ITEM.match(line) if not patterns else None
        if item:
            patterns = [p.strip().strip("\"'") for p in item.group(1).split("|")]
            body = [item.group(2)]
        else:
            body.append(line)
        if ";;" in line:
            stops = _record(options, patterns, " ".join(body)) or stops
            patterns, body = [], []
    return options, stops


def _record(options: dict[str, Option], patterns: list[str], body: str) -> bool:
    """Record one case item; True when it is the catch-all that stops at other words."""
    breaks = re.search(r"\bbreak\b", body) is not None
    if patterns == ["*"]:
        return breaks
    value = _SETS_VALUE.search(body)
    attached = _SETS_ATTACHED.search(body)
    takes = "shift 2" in body or value is not None
    for pattern in patterns:
        if pattern.endswith("=*"):
            options[pattern] = Option(
                attached=True, variable=attached.group(1) if attached else None
            )
        elif pattern.startswith("-"):
            options[pattern] = Option(
                takes_value=takes,
                variable=value.group(1) if value else None,
                ends_options=pattern == "--" or (breaks and not takes),
            )
    return False


def _defaults(lines: list[str]) -> dict[str, str]:
    """Top-level `NAME=value` assignments (a value with a substitution is unknown: left out)."""
    found: dict[str, str] = {}
    for line in lines:
        match = _DEFAULT.match(line)
        if not match or match.group(1) in found:
            continue
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError:
            continue
        if len(words) == 1 and "$" not in words[0] and "`" not in match.group(2):
            found[match.group(1)] = words[0]
    return found


def _passing_on(line: str) -> tuple[tuple[str, ...], ...]:
    """The commands of `line` up to the one that runs "$@" (none when none does)."""
    if not any(marker in line for marker in POSITIONAL):
        return ()
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:
        return ()
    commands: list[list[str]] = [[]]
    for token in tokens:
        if set(token) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    found: list[tuple[str, ...]] = []
    for command in commands:
        while command and command[0] in _KEYWORDS:
            command = command[1:]
        if command:
            found.append(tuple(command))
        if any(word in POSITIONAL for word in command):
            return tuple(found)
    return ()


def expand_command(
    command: tuple[str, ...], args: list[str], expand: Callable[[str], str]
) -> list[str]:
    """The words `command` runs: "$@" replaced by `args`, arrays the script builds
    (`"${ENV_ARGS[@]}"`: option lists) left out, every other word through `expand`."""
    words: list[str] = []
    for word in command:
        if word in POSITIONAL:
            words += args
        elif not _ARRAY.match(word):
            words.append(expand(word))
    return words

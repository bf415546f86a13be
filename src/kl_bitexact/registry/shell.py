"""Find the scripts a `run:` block starts, with their arguments and working directory as the
shell would pass them (pure).

GitHub substitutes `${{ }}` before the shell runs, so the caller does that first; this
module then follows the shell: `\\` continuations and quotes over several lines,
`;`/`&&`/`||`/`|` separated commands, `cd DIR` / `pushd DIR`, `VAR=value` and
`export VAR=value`, `$VAR` / `${VAR}` / `"$VAR"` / `${VAR:-default}` expansion from those
assignments and the step's environment. Commands that run another command are followed
into it: `env [X=Y] CMD`, `timeout N CMD`, `nohup`/`nice`/`sudo`/`stdbuf`/`time CMD`,
`bash -c "SCRIPT"`, `docker exec [-w DIR] CONTAINER CMD` (DIR is a path in the container:
the longest tail of it that is a file of the checkout is taken for that file, as a
container sees the checkout mounted or copied somewhere), and a wrapper script of the
repository (`bash scripts/ci/x.sh -w DIR python3 run_suite.py ...`) whose body passes its
arguments on (`wrappers.py` reads it). A wrapper whose body cannot be read is reported as
`Opaque` when the command it was given starts a suite runner; a value it cannot know is kept
as a marker so the caller can report it instead of taking it for a literal.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kl_bitexact.registry import wrappers

# Marks text whose value is unknown (an unresolved `${{ }}` or shell variable).
UNKNOWN_MARK = "\x00"
# `${NAME}`, `${NAME:-default}`, `$NAME`: groups (braced name, default, plain name)
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}", "!"}
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?$")
_SHELLS = {"bash", "sh", "dash", "zsh"}
_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "exec", "command"}
# Commands that run the rest of their words as a command: options taking a value, and how
# many operands come before the command (timeout's duration).
_PREFIXES: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}), 0),
}
_DOCKER_VALUES = frozenset({"-e", "--env", "-u", "--user", "--env-file", "--detach-keys"})
# Launchers that run a command in a project's environment: `uv run [opts] CMD`, `poetry run
# CMD`, `conda run -n ENV CMD`, ...: the subcommand, and the options that take a value.
_UV_VALUES = frozenset(
    {"--with", "--with-editable", "--with-requirements", "--python", "-p", "--extra",
     "--group", "--only-group", "--no-group", "--project", "--directory", "--package",
     "--env-file", "--index", "--default-index", "--index-url", "-i", "--extra-index-url",
     "--find-links", "-f", "--index-strategy", "--python-preference", "--cache-dir",
     "--config-file", "--color", "--keyring-provider", "--resolution", "--prerelease",
     "--exclude-newer", "--link-mode", "--config-setting", "-C", "--refresh-package",
     "--reinstall-package", "--upgrade-package", "-P", "--no-binary-package",
     "--no-build-package", "--allow-insecure-host", "--no-extra"}
)  # fmt: skip
_LAUNCHERS: dict[str, tuple[str, frozenset[str]]] = {
    "uv": ("run", _UV_VALUES),
    "poetry": ("run", frozenset({"-C", "--directory", "-P", "--project"})),
    "pipenv": ("run", frozenset()),
    "pdm": ("run", frozenset({"-p", "--project"})),
    "rye": ("run", frozenset({"--pyproject"})),
    "hatch": ("run", frozenset()),
    "conda": ("run", frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})),
    "mamba": ("run", frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})),
    "micromamba": ("run", frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})),
}
# Options that change the directory the command runs in.
_LAUNCHER_CHDIR = {"uv": ("--directory",), "conda": ("--cwd",), "mamba": ("--cwd",),
                   "micromamba": ("--cwd",)}  # fmt: skip
_PYTEST = {"pytest", "py.test"}
# pytest options whose value is a separate word (a path among them is not a test path).
_PYTEST_VALUES = frozenset(
    {"-k", "-m", "-p", "-c", "-o", "-W", "-n", "-r", "--ignore", "--ignore-glob",
     "--deselect", "--junitxml", "--junit-xml", "--rootdir", "--basetemp", "--confcutdir",
     "--override-ini", "--maxfail", "--reruns", "--reruns-delay", "--timeout",
     "--durations", "--tb", "--cov", "--cov-report", "--cov-config", "--log-level",
     "--log-file", "--log-cli-level", "--import-mode", "--capture", "--dist",
     "--numprocesses", "--only-rerun", "--html", "--result-log", "--pyargs"}
)  # fmt: skip
_MAX_DEPTH = 6  # wrappers within wrappers
_MAX_QUOTED_LINES = 200  # a quote left open longer than this is not followed


class Checkout(Protocol):
    """The repository's files, as far as following a command needs them."""

    def text(self, path: str) -> str | None:
        """A repository file's text; None when absent or unreadable."""

    def is_file(self, path: str) -> bool: ...


class _NoCheckout:
    def text(self, path: str) -> str | None:
        return None

    def is_file(self, path: str) -> bool:
        return False


NO_CHECKOUT: Checkout = _NoCheckout()


@dataclass(frozen=True)
class Invocation:
    """One command that runs a Python script."""

    script: str  # normalized path, relative to the repository root when it can tell
    args: tuple[str, ...]
    line: int  # 0-based line of the script where the command starts
    # "python": the script run as a program; "pytest": a path pytest collects (a file or a
    # directory; a node id's `::...` cut off)
    how: str = "python"


@dataclass(frozen=True)
class Opaque:
    """A wrapper given a suite runner's command whose body cannot be followed."""

    wrapper: str
    line: int
    why: str


@dataclass
class Followed:
    invocations: list[Invocation] = field(default_factory=list)
    opaque: list[Opaque] = field(default_factory=list)


def invocations(script: str, env: Mapping[str, str], cwd: str = "") -> list[Invocation]:
    return follow(script, env, cwd).invocations


def follow(
    script: str,
    env: Mapping[str, str],
    cwd: str = "",
    checkout: Checkout = NO_CHECKOUT,
    runners: Collection[str] = (),
    markers: Collection[str] = (),
) -> Followed:
    """Every Python script `script` starts (wrappers followed), from `cwd`; `runners` are
    the suite runners' paths, whose basename among a wrapper's arguments makes an
    unreadable wrapper worth reporting; a wrapper given an argument with one of `markers`
    in it (`registered/`: a test file run by path) is followed too."""
    follower = _Follower(checkout, {posixpath.basename(r) for r in runners}, markers)
    # The checkout is the working directory a step starts in.
    follower.script(script, {"GITHUB_WORKSPACE": ".", **env}, cwd, 0, 0)
    return follower.out


class _Follower:
    def __init__(
        self, checkout: Checkout, runner_names: set[str], markers: Collection[str] = ()
    ) -> None:
        self.checkout = checkout
        self.runner_names = runner_names
        self.markers = tuple(markers)
        words = (*runner_names, *self.markers)
        # None: no names to look for (every line is read)
        self.names = re.compile("|".join(map(re.escape, words))) if words else None
        self.out = Followed()

    def script(
        self, text: str, variables: dict[str, str], directory: str, first: int, depth: int
    ) -> None:
        for line, statement in _statements(text):
            if not self._matters(statement, variables):
                continue  # tokenizing every echo of a long script is most of the cost
            for command in _simple_commands(statement):
                directory = self.run(list(command), variables, directory, first + line, depth)

    def _matters(self, statement: str, variables: Mapping[str, str]) -> bool:
        """Whether a logical line can start a runner or a test file (its text, or a
        variable it expands, names one), or change what a later line does (a directory,
        a variable); a line that can do neither is skipped."""
        if self.names is None:
            return True
        matters, expanded = _what_matters(self.names, statement)
        if matters:
            return True
        return any(self.names.search(variables.get(name, "")) for name in expanded)

    def run(
        self, command: list[str], variables: dict[str, str], directory: str, line: int, depth: int
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
        if words[0] in ("cd", "pushd"):
            return _cd(directory, words[1]) if len(words) > 1 else UNKNOWN_MARK
        self.execute(words, variables, directory, line, depth)
        return directory

    def execute(
        self, words: list[str], variables: dict[str, str], directory: str, line: int, depth: int
    ) -> None:
        """Follow one command (already expanded) that runs in `directory`."""
        while words and words[0] in _KEYWORDS:
            words = words[1:]
        if not words or depth > _MAX_DEPTH:
            return
        if words[0] == "eval" or any(c in words[0] for c in " \t\n"):
            # `eval "$CMD"`, or `$CMD` holding a whole command: run as the shell would
            text = " ".join(words[1:] if words[0] == "eval" else words)
            self.script(text, dict(variables), directory, line, depth + 1)
            return
        name = posixpath.basename(words[0])
        if name in _PREFIXES:
            rest, directory = _after_prefix(name, words[1:], directory)
            self.execute(rest, variables, directory, line, depth + 1)
        elif name in _LAUNCHERS and words[1:2] == [_LAUNCHERS[name][0]]:
            rest, directory = _after_launcher(name, words[2:], directory)
            self.execute(rest, variables, directory, line, depth + 1)
        elif name in _PYTEST or _python_module(words) == "pytest":
            self._pytest(words, directory, line)
        elif name == "docker" and words[1:2] == ["exec"]:
            rest, directory = _after_docker_exec(words[2:])
            self.execute(rest, variables, directory, line, depth + 1)
        elif name in _SHELLS:
            self._shell(words[1:], variables, directory, line, depth)
        elif (script_at := _script_index(words)) is not None:
            path = self.normalize(directory, words[script_at])
            self.out.invocations.append(Invocation(path, tuple(words[script_at + 1 :]), line))
        elif words[0].endswith(".sh") or ("/" in words[0] and not _PYTHON.match(name)):
            self._wrapper(words[0], words[1:], directory, line, depth)

    def _pytest(self, words: list[str], directory: str, line: int) -> None:
        """`pytest [opts] PATH...` / `python -m pytest ...`: each path pytest collects."""
        start = 1 if posixpath.basename(words[0]) in _PYTEST else words.index("-m") + 2
        for target in _pytest_targets(words[start:]):
            path = self.normalize(directory, target)
            self.out.invocations.append(Invocation(path, (), line, "pytest"))

    def _shell(
        self, args: list[str], variables: dict[str, str], directory: str, line: int, depth: int
    ) -> None:
        """`bash [-opts] -c SCRIPT` or `bash [-opts] FILE ARGS`."""
        for index, word in enumerate(args):
            if word == "-c" or (word.startswith("-") and not word.startswith("--") and "c" in word):
                if index + 1 < len(args):
                    self.script(args[index + 1], dict(variables), directory, line, depth + 1)
                return
            if not word.startswith(("-", "+")):
                self._wrapper(word, args[index + 1 :], directory, line, depth)
                return

    def _wrapper(self, path: str, args: list[str], directory: str, line: int, depth: int) -> None:
        """A script of the repository started with a command among its arguments."""
        runner = self._starts_runner(args)
        if not runner and not any(m in word for word in args for m in self.markers):
            return
        relative = self.normalize(directory, path)
        if not runner:  # a test run by path: followed where it can be, never reported
            text = self.checkout.text(relative) if UNKNOWN_MARK not in relative else None
            wrapper = wrappers.read(text) if text is not None else "unreadable"
            if not isinstance(wrapper, str):
                self._through(wrapper, args, directory, line, depth)
            return
        if UNKNOWN_MARK in relative:
            shown = relative.replace(UNKNOWN_MARK, "")
            self.out.opaque.append(Opaque(shown, line, "its path is known only to the run"))
            return
        text = self.checkout.text(relative)
        if text is None:
            self.out.opaque.append(Opaque(relative, line, "it is not a readable file here"))
            return
        wrapper = wrappers.read(text)
        if isinstance(wrapper, str):
            self.out.opaque.append(Opaque(relative, line, wrapper))
            return
        self._through(wrapper, args, directory, line, depth)

    def _through(
        self, wrapper: wrappers.Wrapper, args: list[str], directory: str, line: int, depth: int
    ) -> None:
        """Each command of a wrapper that passes its arguments on, run with `args`."""
        values, command = wrapper.apply(args)
        for commands in wrapper.commands:
            here = directory
            for each in commands:
                words = wrappers.expand_command(each, command, lambda w: expand(w, values))
                if words and words[0] in ("cd", "pushd"):
                    here = _cd(here, words[1]) if len(words) > 1 else UNKNOWN_MARK
                elif words:
                    self.execute(words, dict(values), here, line, depth + 1)

    def _starts_runner(self, args: list[str]) -> bool:
        names = {posixpath.basename(word.replace(UNKNOWN_MARK, "")) for word in args}
        if self.runner_names:
            return bool(names & self.runner_names)
        return any(name.endswith(".py") for name in names)

    def normalize(self, directory: str, script: str) -> str:
        """`script` run from `directory` as a repository path (UNKNOWN_MARK-prefixed when
        that cannot be told)."""
        script = _strip_workspace(script)
        if UNKNOWN_MARK in script or (UNKNOWN_MARK in directory and not script.startswith("/")):
            return UNKNOWN_MARK + script
        path = posixpath.normpath(posixpath.join(directory, script))
        if not path.startswith("/"):
            return path
        return self._in_checkout(path)

    def _in_checkout(self, absolute: str) -> str:
        """The longest tail of an absolute path that is a file of the checkout (a container
        sees the checkout at a path of its own: /sglang-checkout/test/run_suite.py)."""
        parts = absolute.strip("/").split("/")
        for start in range(len(parts)):
            tail = "/".join(parts[start:])
            if self.checkout.is_file(tail):
                return tail
        return UNKNOWN_MARK + absolute


@functools.lru_cache(maxsize=1024)
def _statements(text: str) -> tuple[tuple[int, str], ...]:
    """(0-based first line, text) per logical line: `\\` continuations joined, and a
    quote left open continued on the next lines (`bash -c "` over several lines). Cached:
    a step's script is followed once per caller and matrix combination."""
    return tuple(_logical_lines(text))


@functools.lru_cache(maxsize=8192)
def _what_matters(names: re.Pattern[str], statement: str) -> tuple[bool, tuple[str, ...]]:
    """What `_Follower._matters` reads of a statement's own text, once per statement: a
    step is read once per caller and matrix combination, its script's lines alike but for
    the few an input changes. (Whether its text names a runner or changes state; else the
    variables it expands.)"""
    if names.search(statement) or _STATE_CHANGE.search(statement):
        return True, ()
    if "$" not in statement:
        return False, ()
    return False, tuple(plain or braced for braced, _, plain in VARIABLE.findall(statement))


@functools.lru_cache(maxsize=8192)
def _balanced(line: str) -> bool:
    """Whether every quote of `line` is closed (once per line: see `_what_matters`)."""
    return _BALANCED.fullmatch(line) is not None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start = index
        joined = lines[index]
        index += 1
        while True:
            while joined.endswith("\\") and index < len(lines):
                joined = joined[:-1] + " " + lines[index]
                index += 1
            if _balanced(joined):
                found.append((start, joined))
                break
            # an open quote: it continues on the next line
            if index >= len(lines) or index - start > _MAX_QUOTED_LINES:
                break  # unbalanced quotes: not something to guess about
            joined = joined + "\n" + lines[index]
            index += 1
    return found


# One token of a shell line: blanks, a comment (only where a word could start), a run of
# operator characters, or a word made of plain characters, `\\x` escapes and quoted parts.
_TOKEN = re.compile(
    r"""(?P<blank>[ \t\r\n]+)|(?P<comment>\#[^\n]*)|(?P<operator>[();<>|&]+)"""
    r"""|(?P<word>(?:[^\s'"\\();<>|&]+|\\[\s\S]|'[^']*'|"(?:[^"\\]|\\[\s\S])*")+)"""
)
# A line whose quotes are all closed (possessive: linear even when they are not).
_BALANCED = re.compile(
    r"""(?:[^'"\\#]++|\\[\s\S]|'[^']*+'|"(?:[^"\\]|\\[\s\S])*+"|(?<![^\s;&|()])\#[^\n]*+|\#)*+"""
)
# A line that may change what later lines do: a `cd`/`pushd`, or a variable assignment.
_STATE_CHANGE = re.compile(
    r"(?:^|[;&|(]|\b(?:then|do|else)\b)\s*"
    r"(?:cd\b|pushd\b|(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?[A-Za-z_]\w*=)"
)
_QUOTED = re.compile(r"\\([\s\S])|'([^']*)'|" + r'"((?:[^"\\]|\\[\s\S])*)"')
_ESCAPED_IN_DOUBLE = re.compile(r'\\([\\"$`])')


def tokens(line: str) -> list[str]:
    """The words and operators of a shell line as POSIX shell quoting makes them (quotes
    removed, escapes applied; `#` starts a comment only where a word could start). An
    open quote raises ValueError: the caller continues the line with the next one."""
    found: list[str] = []
    position = 0
    while position < len(line):
        match = _TOKEN.match(line, position)
        if match is None:
            raise ValueError(f"open quote at {position}")
        position = match.end()
        if match.lastgroup == "operator":
            found.append(match.group())
        elif match.lastgroup == "word":
            found.append(_unquoted(match.group()))
    return found


@functools.lru_cache(maxsize=4096)
def _simple_commands(statement: str) -> tuple[tuple[str, ...], ...]:
    """The simple commands of a logical line, each as its words (cached, as `_statements`)."""
    return tuple(tuple(command) for command in _commands(_tokens_or_none(statement)))


def _tokens_or_none(statement: str) -> list[str]:
    try:
        return tokens(statement)
    except ValueError:  # quoting this reader cannot take apart: not guessed about
        return []


def _unquoted(word: str) -> str:
    if "\\" in word or "'" in word or '"' in word:
        return _QUOTED.sub(_unquote, word)
    return word


def _unquote(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(1)
    if match.group(2) is not None:
        return match.group(2)
    return _ESCAPED_IN_DOUBLE.sub(r"\1", match.group(3))


def _commands(words: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for token in words:
        if token in _SEPARATORS or set(token) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def expand(word: str, variables: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        return UNKNOWN_MARK + match.group(0) + UNKNOWN_MARK

    return VARIABLE.sub(replace, word)


def _after_prefix(name: str, words: list[str], directory: str) -> tuple[list[str], str]:
    """The command `env`/`timeout`/... runs, and its working directory (`env -C DIR`)."""
    with_value, operands = _PREFIXES[name]
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        option, equals, value = words[index].partition("=")
        if option in with_value and not equals:
            value = words[index + 1] if index + 1 < len(words) else ""
            index += 1
        if option in ("-C", "--chdir") and name == "env":
            directory = _cd(directory, value)
        index += 1
    if name == "env":
        while index < len(words) and _ASSIGNMENT.match(words[index]):
            index += 1
    return words[index + operands :], directory


def _after_launcher(name: str, words: list[str], directory: str) -> tuple[list[str], str]:
    """The command `uv run` / `poetry run` / `conda run` ... runs, and its directory; `uv
    run -m MOD` runs `python -m MOD`."""
    _, with_value = _LAUNCHERS[name]
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "--":
        option, equals, value = words[index].partition("=")
        if option in ("-m", "--module") and name == "uv":
            return ["python", "-m", *words[index + 1 :]], directory
        if option in with_value and not equals:
            value = words[index + 1] if index + 1 < len(words) else ""
            index += 1
        if option in _LAUNCHER_CHDIR.get(name, ()):
            directory = _cd(directory, value)
        index += 1
    if words[index : index + 1] == ["--"]:
        index += 1
    return words[index:], directory


def _python_module(words: list[str]) -> str | None:
    """The module of `python [-opts] -m MODULE ...`, else None."""
    if not _PYTHON.match(posixpath.basename(words[0])):
        return None
    for index in range(1, len(words) - 1):
        if words[index] == "-m":
            return words[index + 1]
        if not words[index].startswith("-"):
            return None
    return None


def _pytest_targets(args: list[str]) -> list[str]:
    """The paths among pytest's arguments (`FILE.py`, `FILE.py::Test::test`, `DIR/`)."""
    targets = []
    skip = False
    for word in args:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _PYTEST_VALUES
        else:
            path = word.split("::", 1)[0]
            if path.endswith(".py") or path.endswith("/") or "/" in path:
                targets.append(path)
    return targets


def _after_docker_exec(words: list[str]) -> tuple[list[str], str]:
    """`docker exec [OPTIONS] CONTAINER CMD...`: CMD, and the directory `-w` gives it (else
    the container's own working directory, which the workflow cannot tell)."""
    directory = UNKNOWN_MARK
    index = 0
    while index < len(words) and words[index].startswith("-"):
        option, equals, value = words[index].partition("=")
        if option in ("-w", "--workdir") or option in _DOCKER_VALUES:
            if not equals:
                value = words[index + 1] if index + 1 < len(words) else ""
                index += 1
            if option in ("-w", "--workdir"):
                directory = _cd("", value)
        index += 1
    return words[index + 1 :], directory


def _cd(directory: str, target: str) -> str:
    if UNKNOWN_MARK in target or target in ("", "-", "~") or target.startswith("~"):
        return UNKNOWN_MARK
    target = _strip_workspace(target)
    if not target.startswith("/") and directory == UNKNOWN_MARK:
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


def _strip_workspace(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path

"""Why a server stopped while starting, in one line, read from its log (pure).

The summary of a failed launch ended at "server exited with code 2; last log lines:" with
nothing after (issue 27): its first line has to say why on its own. A server's own error
line says it best - argparse's `error: unrecognized arguments: --x` (sglang, vLLM and
kl-bitexact's reference engine all parse their flags with argparse), llama.cpp's
`error: invalid argument: --x`, a Python traceback's last line - and when it names a
command-line argument, the options its usage text lists give the closest spelling.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kl_bitexact.errors import did_you_mean
from kl_bitexact.untrusted import escape

# Lines kl-bitexact itself writes into a server's log: the command it ran, its own notes.
_OURS = re.compile(r"^(\$ |\[kl-bitexact)")
_ERROR = re.compile(
    r"\berror\b|exception|fatal|invalid|unrecognized|unknown|not found|no such|denied", re.I
)
_UNRECOGNIZED = re.compile(r"unrecognized arguments?: (\S+)")
_ARGPARSE_ARGUMENT = re.compile(r"\berror: argument ([^\s:/]+)(?:/\S+)?: ")
_INVALID_ARGUMENT = re.compile(r"\b(?:invalid|unknown) (?:argument|option):? (-[^\s:]+)", re.I)
_OPTION = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*")
MAX_LINE = 300


def telling_line(lines: Sequence[str]) -> str:
    """The log's last line that reads as an error, else its last line of the server's
    own; "" for an empty log. Made safe for a terminal and bounded."""
    own = [line for line in lines if line.strip() and not _OURS.match(line)]
    errors = [line for line in own if _ERROR.search(line)]
    chosen = errors[-1] if errors else own[-1] if own else ""
    return escape.terminal(chosen, MAX_LINE)


def failing_argument(lines: Sequence[str]) -> str | None:
    """The command-line argument the server's own error names, if it names one."""
    for line in reversed(lines):
        if _OURS.match(line):
            continue
        for pattern in (_UNRECOGNIZED, _ARGPARSE_ARGUMENT, _INVALID_ARGUMENT):
            found = pattern.search(line)
            if found:
                return escape.terminal(found.group(1).split("=", 1)[0], 100)
    return None


def argument_hint(lines: Sequence[str]) -> str | None:
    """`the server refused its argument --x (did you mean '--y'?)` from the options the
    log lists (a usage text, or the server's own suggestion), None when it names none."""
    argument = failing_argument(lines)
    if argument is None:
        return None
    listed = {
        option
        for line in lines
        if not _OURS.match(line)
        for option in _OPTION.findall(line)
        if option != argument
    }
    close = did_you_mean(argument, listed)
    return f"the server refused its argument {argument}" + (f" ({close})" if close else "")

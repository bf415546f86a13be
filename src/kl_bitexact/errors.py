"""The one family of errors that end a command with a clear message.

Anything raised that is *not* a FatalError is a bug in kl-bitexact; the CLI handler
reports it separately (exit 3) instead of blaming the user.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from enum import IntEnum

# requests and urllib3 nest the OS's words several exceptions deep, behind object reprs:
# "HTTPConnectionPool(host=..., port=1): Max retries exceeded ... [Errno 111] Connection refused')".
_OS_REASON = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


class ExitCode(IntEnum):
    """Process exit codes (contract, see docs/cli.md, "Exit codes")."""

    GATE_PASSED = 0
    GATE_FAILED = 1
    COULD_NOT_RUN = 2
    INTERNAL_ERROR = 3
    # 128 + the signal's number, as shells report a process ended by that signal.
    HANGUP = 129  # SIGHUP: the terminal or session went away
    INTERRUPTED = 130  # SIGINT: Ctrl-C
    STDOUT_CLOSED = 141  # SIGPIPE: standard output's reader went away (`| head -1`)
    TERMINATED = 143  # SIGTERM: a CI runner cancelling the job, `kill`


class FatalError(Exception):
    """A condition the user can fix; printed as one message, exit 2.

    `hint` says what to do next; it is printed on its own line after the message.
    """

    exit_code = ExitCode.COULD_NOT_RUN

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(FatalError):
    """A file or option the user gave is missing, malformed or inconsistent."""


class ServerError(FatalError):
    """The inference server could not be started, reached or kept alive."""


class GitHubError(FatalError):
    """GitHub refused or could not be reached."""


class EngineError(ServerError):
    """A request to a running inference server failed: timeout, HTTP error, bad answer.

    Raised by engine adapters. `run` turns it into an `error` test result and goes on;
    outside a run it ends the command with exit 2 like any ServerError.
    """


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived: unwind, tear down, exit 128+N.

    A KeyboardInterrupt, so every `except Exception` lets it through and every cleanup
    written for Ctrl-C (finally blocks, `closing()`) runs for the other signals too.
    """

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def did_you_mean(
    word: str, known: Iterable[str], *, quote: Callable[[str], str] = repr
) -> str | None:
    """`did you mean 'closest'?` for the known word nearest `word` (difflib's similarity of
    at least 0.6), or None when none is that close: every message about an unknown name
    (suite key or value, registry argument, runner, suite, config key) words it this way."""
    import difflib  # only on the way to an error message

    close = difflib.get_close_matches(word, list(known), n=1)
    return f"did you mean {quote(close[0])}?" if close else None


def network_reason(error: BaseException | None) -> str:
    """A network failure in the OS's words ("Connection refused", "Name or service not
    known"), else the exception's type: never a page of nested reprs."""
    if error is None:
        return "failed"
    found = _OS_REASON.search(str(error))
    if found:
        return found.group(1).strip()
    if "timed out" in str(error).lower() or "timeout" in type(error).__name__.lower():
        return "timed out"
    return type(error).__name__

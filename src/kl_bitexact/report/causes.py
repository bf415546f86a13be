"""Why tests could not run, said once for the reader (pure).

A test that did not measure because the server, the runner or the run failed is never the
change's regression (issue 27): eight rows of "regressed" for one refused connection made
reviewers blame the PR for a dead runner. The comment names the cause once, in the
headline when nothing else gated (or in one line under it), says whose it is - the runner,
or the server the change may have built - and what to do; the rows say "could not run".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kl_bitexact.compare.comparison import TestDelta
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.results.formats import plural
from kl_bitexact.results.model import Cause, TestResult
from kl_bitexact.untrusted import escape

# The runner's fault is said as such; a server kl-bitexact launched from the suite may be
# the change's own build, so it is not blamed on the runner, nor on the change.
_WHOSE = {
    Cause.RUNNER: "this is the runner, not the change",
    Cause.SERVER: "the server did not start or died, so nothing about the change was measured",
    Cause.CHECK: "nothing about the change was measured",
    Cause.UNKNOWN: "nothing about the change was measured",
}
_TO_DO = {
    Cause.RUNNER: "run the job again once the runner (or the server it points at) is healthy",
    Cause.SERVER: "read the server's log (logs/ in the results artifact) for why it stopped",
    Cause.CHECK: "see each test's error in the details below",
    Cause.UNKNOWN: "see each test's error in the details below",
}
# Prefixes the runner puts before the message of the failure they repeat.
_REPEATS = ("not tried again; ", "not run: the server died earlier in this suite; ")
# The runner's per-test words for a run that stopped, said of the run (runner.why_stopped,
# comparison's stand-in for a planned test without a result), with what to do about it.
_STOPPED = (
    (
        re.compile(r"^interrupted: (\S+) before this test finished$"),
        "the run was interrupted ({0})",
        "run the job again (a cancelled job, a timeout or Ctrl-C stopped it)",
    ),
    (
        re.compile(r"^run aborted before this test finished: (.*)$"),
        "the run aborted: {0}",
        "run the job again; if it aborts again, the message says why",
    ),
    (
        re.compile(r"^no verdict: the run stopped before this planned test"),
        "the run stopped before its last tests (killed outright?)",
        "run the job again (a run killed with SIGKILL, or out of memory, writes nothing more)",
    ),
    (
        re.compile(r"^no verdict: (.*)$"),
        "no result: {0}",
        "run the job again (a run killed outright, or a shard that uploaded nothing)",
    ),
)


@dataclass(frozen=True)
class Unmeasured:
    """The tests that could not run, and their most common cause."""

    count: int
    cause: Cause
    message: str  # what went wrong, as the first such test says it
    hint: str  # what to do, when the failure said
    others: int  # tests that could not run for another reason
    root: tuple[Cause, str] = (Cause.UNKNOWN, "")  # the cause and message the tests share


def unmeasured(deltas: Iterable[TestDelta]) -> Unmeasured | None:
    tests = [d.head for d in deltas if d.verdict is Verdict.COULD_NOT_RUN and d.head]
    if not tests:
        return None
    roots = Counter((test.cause, _root(test.message)) for test in tests)
    (cause, message), same = roots.most_common(1)[0]
    root = message
    hint = next((t.hint for t in tests if t.cause is cause and _root(t.message) == message), "")
    for pattern, said, to_do in _STOPPED:
        if match := pattern.match(message):
            message, hint = said.format(*match.groups()), hint or to_do
    return Unmeasured(len(tests), cause, message, hint, len(tests) - same, (cause, root))


def said_once(found: Unmeasured | None, test: TestResult) -> bool:
    """Whether `block` already says why this test could not run (its details need not)."""
    return found is not None and (test.cause, _root(test.message)) == found.root


def headline(found: Unmeasured) -> str:
    """Short, for the h2: `the server exited with code 2 (8 tests)`; the rest is `block`'s."""
    others = f"; {found.others} more for other reasons" if found.others else ""
    tests = plural(found.count - found.others, "test")
    return f"{escape.text(short(found.message), 160)} ({tests}{others})"


def short(message: str) -> str:
    """The first line's first clause, without the suite's name before it."""
    first = _SUITE_PREFIX.sub("", message.strip().split("\n")[0])
    clause = first.split(": ", 1)[0]
    return clause if len(clause) >= MIN_CLAUSE else _whole_words(first, MAX_SHORT)


_SUITE_PREFIX = re.compile(r"^suite [^:]{1,200}: ")
MIN_CLAUSE, MAX_SHORT = 20, 120


def _whole_words(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + escape.ELLIPSIS


def block(found: Unmeasured, artifact: str | None) -> str:
    """The cause in one line (the tests it stopped, why, whose it is), what to do, and the
    server's last words folded under it; a log on the runner is a link to the uploaded
    artifact (the path only in the terminal)."""
    lines = found.message.strip().split("\n")
    others = f" ({found.others} more for other reasons)" if found.others else ""
    what = f"{plural(found.count - found.others, 'test')} could not run{others}"
    first = _off_runner(lines[0][:600], artifact)
    text = f"🔌 **{what}**: {first}; {_WHOSE[found.cause]}.  \n{what_to_do(found, artifact)}\n"
    if len(lines) > 1:
        words = escape.block(_off_runner_plain("\n".join(lines[1:])), 4000)
        text += f"\n<details><summary>The server's last words</summary>\n\n{words}\n\n</details>\n"
    return text


def what_to_do(found: Unmeasured, artifact: str | None = None) -> str:
    hint = (found.hint or _TO_DO[found.cause]).rstrip(".")[:400]
    return f"**What to do:** {_off_runner(hint, artifact)}."


# A path on the runner (its temp folder) means nothing to a reader of the PR: a log under
# the run's logs/ is in the uploaded results artifact.
_RUNNER_LOG = re.compile(r"(?:/[^\s/]+)*/(logs/[\w.\-/]+\.log)")


def _off_runner(raw: str, artifact: str | None) -> str:
    """`raw` escaped, each runner log path in it said as the artifact's file (a link)."""
    pieces = _RUNNER_LOG.split(raw)  # text, log, text, log, ..., text
    out = []
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            out.append(escape.text(piece, 2000))
        elif artifact is None:
            out.append(f"{escape.code(piece, 200)} (beside results.json)")
        else:
            out.append(f"[{escape.code(piece, 200)} in the results artifact]({artifact})")
    return "".join(out)


def _off_runner_plain(text: str) -> str:
    return _RUNNER_LOG.sub(r"\1", text)


def _root(message: str) -> str:
    for prefix in _REPEATS:
        if prefix in message:
            message = message.split(prefix, 1)[1]
    return message or "no message"

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
from kl_bitexact.results.model import Cause
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


def unmeasured(deltas: Iterable[TestDelta]) -> Unmeasured | None:
    tests = [d.head for d in deltas if d.verdict is Verdict.COULD_NOT_RUN and d.head]
    if not tests:
        return None
    roots = Counter((test.cause, _root(test.message)) for test in tests)
    (cause, message), same = roots.most_common(1)[0]
    hint = next((t.hint for t in tests if t.cause is cause and _root(t.message) == message), "")
    for pattern, said, to_do in _STOPPED:
        if match := pattern.match(message):
            message, hint = said.format(*match.groups()), hint or to_do
    return Unmeasured(len(tests), cause, message, hint, len(tests) - same)


def headline(found: Unmeasured) -> str:
    """`the server ... refused connections - 8 tests did not measure; this is the runner,
    not the change`"""
    others = f" ({found.others} for other reasons)" if found.others else ""
    measured = f"{plural(found.count, 'test')} did not measure{others}"
    return f"{escape.text(found.message, 300)} - {measured}; {_WHOSE[found.cause]}"


def what_to_do(found: Unmeasured) -> str:
    return f"**What to do:** {escape.text((found.hint or _TO_DO[found.cause]).rstrip('.'), 400)}."


def line(found: Unmeasured) -> str:
    """The same, under a headline that had other reasons to fail (or pass)."""
    return f"🔌 Could not run: {headline(found)}. {what_to_do(found)}"


def _root(message: str) -> str:
    for prefix in _REPEATS:
        if prefix in message:
            message = message.split(prefix, 1)[1]
    return message or "no message"

"""What `run` prints when it ends, for a person at a terminal (pure).

The PR comment is Markdown with HTML escapes, unreadable in a terminal, and its most useful
fact - where a red test first diverged - sat only in report.md (issue 20). So the run ends
with one plain line per test that did not pass: its first divergence (sample, decoded
token, position against the cached prefix and the page and checkpoint boundaries) or, with
none, the first line of why it failed.
"""

from __future__ import annotations

from kl_bitexact.results.model import Results, Status, TestResult
from kl_bitexact.untrusted import escape

# Plenty for a boundary hint; a server's error message can be megabytes.
MAX_REASON = 400
QUIET = frozenset({Status.PASSED, Status.SKIPPED})


def not_passed_lines(results: Results) -> list[str]:
    """`  FAILED   suite::test: first divergence ...`, one per test that did not pass; tests
    that did not pass for one same reason (a server that did not start, a URL nobody
    answers) share one line: `  ERROR    suite::a and 7 more: why`."""
    groups: dict[tuple[str, str], list[str]] = {}
    for _, test in results.all_tests():
        if test.status not in QUIET:
            groups.setdefault((test.status.value.upper(), reason(test)), []).append(test.id)
    return [f"  {status:8} {_tests(ids)}: {why}" for (status, why), ids in groups.items()]


def _tests(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{ids[0]} and {len(ids) - 1} more"


def reason(test: TestResult) -> str:
    # Server text goes to a terminal: no control sequences, one line.
    if test.first_divergence:
        return escape.terminal(first_divergence(test), MAX_REASON)
    message = test.message.strip().splitlines()
    return escape.terminal(message[0], MAX_REASON) if message else test.status.value


def first_divergence(test: TestResult) -> str:
    first = test.first_divergence[0]
    parts = [f"first divergence in sample {first.sample} at decoded token {first.token_index}"]
    # The boundary hint already names the position, the cached prefix and the boundaries.
    if first.hint:
        parts.append(first.hint)
    if first.cached_tokens is None:
        parts.append("cached tokens not reported by the server")
    elif not first.hint:
        parts.append(f"{first.cached_tokens} cached tokens")
    others = len(test.first_divergence) - 1
    if others:
        parts.append(f"{others} more differing {'sample' if others == 1 else 'samples'}")
    return "; ".join(parts)

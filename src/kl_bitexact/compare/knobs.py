"""Knobs that stay load bearing: what a change did to a test's server arguments and its
stated facts, against the base (issue 35, item 4; pure).

sglang PR 34356: "every knob is load bearing: dropping any one of them returns the
measurement to zero even with a broken state layer". A later change that drops a knob (or
the fact that guarded it) disarms the test, and it stays green; so the comment says, beside
the test, what its server's arguments and stated facts were on the base and are now.
Arguments are compared as flag groups (`--page-size 128` is one knob), the program before
the first flag left out (an interpreter's path differs between runners); a server the run
attached to (`--base-url`) has no arguments of ours to compare.
"""

from __future__ import annotations

from collections.abc import Sequence

from kl_bitexact.results.model import ServerInfo, TestResult

ATTACHED = "--base-url"


def changes(
    head: TestResult,
    base: TestResult,
    head_server: ServerInfo | None,
    base_server: ServerInfo | None,
) -> tuple[str, ...]:
    """What differs, one line per knob or fact, each saying what the base had."""
    return (*argument_changes(head_server, base_server), *fact_changes(head, base))


def flag_groups(args: Sequence[str]) -> tuple[str, ...]:
    """`--flag value...` groups in order; the program before the first flag is left out."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--"):
            groups.append([arg])
        elif groups:
            groups[-1].append(arg)
    return tuple(" ".join(group) for group in groups)


def argument_changes(head: ServerInfo | None, base: ServerInfo | None) -> list[str]:
    """The server's flag groups dropped and added (one suite's server, all its tests')."""
    if head is None or base is None or ATTACHED in (*head.args[:1], *base.args[:1]):
        return []
    now, before = flag_groups(head.args), flag_groups(base.args)
    dropped = [group for group in before if group not in now]
    added = [group for group in now if group not in before]
    lines = [f"server argument dropped: {group} (the base had it)" for group in dropped]
    return lines + [f"server argument added: {group} (not on the base)" for group in added]


def fact_changes(head: TestResult, base: TestResult) -> list[str]:
    """The test's stated facts dropped, added or expecting another value."""
    if not head.facts and not base.facts:
        return []
    now = {fact.name: fact.expected for fact in head.facts}
    before = {fact.name: fact.expected for fact in base.facts}
    lines = []
    for name in sorted(now.keys() | before.keys()):
        if name not in now:
            lines.append(f"fact {name} no longer stated (the base expected {before[name]})")
        elif name not in before:
            lines.append(f"fact {name} newly stated: {now[name]}")
        elif now[name] != before[name]:
            lines.append(f"fact {name} expected {now[name]} (the base expected {before[name]})")
    return lines

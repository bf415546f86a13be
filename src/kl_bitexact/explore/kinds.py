"""Which bug a finding shows, told from what was observed (pure), so that one run reports
each bug once however many workloads show it.

Two findings are the same bug when the check that failed and where the hit sat against the
geometry are the same: a miscounted hit (which rule it broke), or a diverging token (on a
prefix restored from the host tier, after requests hung up on, sent apart, or in a plain
batch) with its cached prefix sorted coarsely (none, under or off a page, exactly one page,
several whole pages). Coarse on purpose: a bug found once on a 5-page prefix and again on
a 6-page one is one bug, reported once; a bug that shows on exactly one page is told apart
from one on longer prefixes (sglang issue 22819 lives on exactly one block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.hits import Miscount
from kl_bitexact.explore.workload import APART

if TYPE_CHECKING:
    from kl_bitexact.explore.execute import Finding

MISCOUNTED = "miscounted hit"
DIVERGED = "token divergence"
RESTORED = "pressure restore"
ABANDONED = "abandoned reuse"
SENT_APART = "sent apart"


@dataclass(frozen=True)
class Kind:
    check: str  # what failed: MISCOUNTED, DIVERGED, RESTORED, ABANDONED or SENT_APART
    where: str  # the rule a miscount broke, or where a diverging request's hit sat

    def __str__(self) -> str:
        return f"{self.check}: {self.where}"

    @property
    def core(self) -> tuple[bool, str]:
        """The kind without what a diverging request was served after (a hang-up, a
        restore, requests sent apart): what shrinking a finding keeps."""
        return (self.check == MISCOUNTED, self.where)


def kind_of(finding: Finding, geometry: Geometry) -> Kind:
    """The bug `finding` shows (see the module's doc)."""
    if isinstance(finding, Miscount):
        return Kind(MISCOUNTED, _broken_rule(finding, geometry))
    served = finding.served
    cached = served.generation.cached_tokens
    if served.hung_up_before:
        check = ABANDONED
    elif served.generation.cached_from_host:
        check = RESTORED
    elif served.sent == APART:
        check = SENT_APART
    else:
        check = DIVERGED
    return Kind(check, hit_class(cached, geometry))


def hit_class(cached: int | None, geometry: Geometry) -> str:
    """A cached prefix against the page size, coarsely."""
    page = geometry.page_size
    if cached is None:
        return "cached_tokens not reported"
    if cached == 0:
        return "no cached prefix"
    if cached < page:
        return "a cached prefix under a page"
    if cached % page:
        return "a cached prefix off a page boundary"
    return "a cached prefix of exactly 1 page" if cached == page else "several whole pages cached"


def _broken_rule(miscount: Miscount, geometry: Geometry) -> str:
    broken = []
    if miscount.observed % geometry.page_size:
        broken.append("not a whole number of pages")
    if miscount.observed > miscount.allowed:
        broken.append("more than the shared prefix allows")
    return ", ".join(broken)

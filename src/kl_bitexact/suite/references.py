"""`blocked_by` references (`#N`, `owner/repo#N`, a pull or issue URL), parsed and checked.

Suite files, pytest markers and results all carry them, so they live at the bottom of the
flow; what a blocker's state means for the gate is compare.blockers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kl_bitexact.errors import ConfigError

_SHORT = re.compile(r"^(?:(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+))?#(?P<number>[1-9]\d*)$")
_URL = re.compile(
    r"^https?://[^/\s]+/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/(?:pull|issues)/(?P<number>[1-9]\d*)/?$"
)


@dataclass(frozen=True, order=True)
class BlockerRef:
    owner: str
    repo: str
    number: int

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}#{self.number}"


def parse_ref(text: str, default_repo: str | None = None) -> BlockerRef:
    """Parse `#N`, `owner/repo#N` or a pull/issue URL; `#N` needs `default_repo`."""
    match = _SHORT.match(text.strip()) or _URL.match(text.strip())
    if match is None:
        raise ConfigError(
            f"blocked_by {text!r} is not a pull request or issue reference",
            hint="write owner/repo#N, #N, or https://github.com/owner/repo/pull/N",
        )
    owner, repo = match.group("owner"), match.group("repo")
    if owner is None:
        if default_repo is None or "/" not in default_repo:
            raise ConfigError(
                f"blocked_by {text!r} has no repository and none is known",
                hint="write owner/repo#N, or set GITHUB_REPOSITORY",
            )
        owner, repo = default_repo.split("/", 1)
    return BlockerRef(owner, repo, int(match.group("number")))

"""May this workflow run execute the PR's code on our (self-hosted, GPU) runners?

A self-hosted runner that runs a stranger's PR is the classic Actions takeover: the code
keeps the machine. So fork PRs run only when a maintainer vouches for the exact head:
the author is an owner, member or collaborator, or the trusted label was just applied
(the `labeled` event; a push afterwards is a `synchronize` event the label does not cover,
so the label must be applied again). Decided from the event payload file, never from
expressions spliced into a script.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PR_EVENTS = ("pull_request", "pull_request_target")
TRUSTED_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")


@dataclass(frozen=True)
class Trust:
    trusted: bool
    reason: str


def decide(event_name: str, event: Mapping[str, Any], repository: str, trusted_label: str) -> Trust:
    if event_name not in PR_EVENTS:
        return Trust(True, f"{event_name} event in {repository}, not a pull request")
    pull = event.get("pull_request") or {}
    head_repo = ((pull.get("head") or {}).get("repo") or {}).get("full_name")
    association = str(pull.get("author_association", "NONE"))
    if head_repo == repository:
        return Trust(True, f"the PR's branch is in {repository}")
    if association in TRUSTED_ASSOCIATIONS:
        return Trust(True, f"the PR's author is a {association.lower()} of {repository}")
    label = (event.get("label") or {}).get("name")
    if event.get("action") == "labeled" and label == trusted_label:
        return Trust(True, f"a maintainer applied the `{trusted_label}` label to this head")
    return Trust(
        False,
        f"fork PR from {head_repo or 'an unknown repository'} by a {association.lower()}: "
        f"its code runs after a maintainer reviews it and applies the `{trusted_label}` label",
    )

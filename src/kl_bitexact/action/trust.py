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

# The closed list. Anything else - including events added to GitHub later - is untrusted.
# Events whose code is the repository's own: a push to one of its branches, a schedule or
# a manual/API dispatch (both need write access) run what is already in the repository.
OWN_CODE_EVENTS = ("push", "schedule", "workflow_dispatch", "repository_dispatch", "merge_group")
# Events about a pull request, whose head may be a fork's: trusted only for a head in this
# repository, an author in TRUSTED_ASSOCIATIONS, or (pull_request events only) the label.
PR_EVENTS = ("pull_request", "pull_request_target")
REVIEW_EVENTS = ("pull_request_review", "pull_request_review_comment")
TRUSTED_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")


@dataclass(frozen=True)
class Trust:
    trusted: bool
    reason: str


def decide(event_name: str, event: Mapping[str, Any], repository: str, trusted_label: str) -> Trust:
    if event_name in OWN_CODE_EVENTS:
        return Trust(True, f"{event_name} event in {repository}: the repository's own code")
    if event_name == "workflow_run":
        return _workflow_run(event, repository)
    if event_name not in PR_EVENTS + REVIEW_EVENTS:
        return Trust(
            False,
            f"{event_name or 'an unnamed'} event: not one of the events that may run code on "
            f"these runners ({', '.join(OWN_CODE_EVENTS + PR_EVENTS + REVIEW_EVENTS)}, "
            "workflow_run from this repository)",
        )
    pull = _mapping(event.get("pull_request"))
    head_repo = _mapping(_mapping(pull.get("head")).get("repo")).get("full_name")
    association = str(pull.get("author_association", "NONE"))
    if head_repo == repository:
        return Trust(True, f"the PR's branch is in {repository}")
    if association in TRUSTED_ASSOCIATIONS:
        return Trust(True, f"the PR's author is a {association.lower()} of {repository}")
    label = _mapping(event.get("label")).get("name")
    if event_name in PR_EVENTS and event.get("action") == "labeled" and label == trusted_label:
        return Trust(True, f"a maintainer applied the `{trusted_label}` label to this head")
    return Trust(
        False,
        f"fork PR from {head_repo or 'an unknown repository'} by a {association.lower()} "
        f"({event_name}): its code runs after a maintainer reviews it and applies the "
        f"`{trusted_label}` label",
    )


def _workflow_run(event: Mapping[str, Any], repository: str) -> Trust:
    """A run following another: its head is the fork's when that run was a fork PR's."""
    run = _mapping(event.get("workflow_run"))
    head_repo = _mapping(run.get("head_repository")).get("full_name")
    if head_repo == repository:
        return Trust(True, f"workflow_run of a run on {repository}'s own code")
    return Trust(
        False,
        f"workflow_run of a run on {head_repo or 'an unknown repository'}'s code: "
        "checking it out here would run a fork's code",
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

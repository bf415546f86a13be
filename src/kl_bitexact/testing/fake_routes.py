"""The GitHub REST endpoints the fake implements, as functions of (world, request).

Every JSON object starts as the skeleton of its schema in GitHub's OpenAPI description and
gets the fields that matter filled in, with `url` fields pointing at the fake itself so
PyGithub follows them back here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, unquote

from kl_bitexact.testing.fake_state import (
    Artifact,
    Comment,
    IssueEvent,
    Pull,
    Repo,
    Run,
    World,
    now_iso,
)
from kl_bitexact.testing.openapi_spec import load_spec
from kl_bitexact.testing.skeleton import component, merged

DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
# GitHub rejects longer commit status descriptions with 422.
MAX_STATUS_DESCRIPTION = 140


@dataclass(frozen=True)
class Call:
    """One API request, decoded."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    body: Any
    base_url: str  # the API base (with a GHES /api/v3 prefix, if any)
    blob_url: str  # where artifact downloads redirect to

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # a non-JSON body (artifact archives)


Handler = Callable[[World, Call, re.Match[str]], Answer]
Item = TypeVar("Item")
_REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"


def not_found() -> Answer:
    return Answer(
        404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
    )


def _repo(world: World, match: re.Match[str]) -> Repo | None:
    return world.repos.get(f"{match['owner']}/{match['repo']}")


def _repo_url(call: Call, repo: Repo) -> str:
    return f"{call.base_url}/repos/{repo.full_name}"


# --- issue comments ---------------------------------------------------------------------


def _comment_json(call: Call, repo: Repo, comment: Comment) -> Any:
    base = _repo_url(call, repo)
    return merged(
        component(load_spec(), "issue-comment"),
        {
            "id": comment.id,
            "node_id": f"IC_{comment.id}",
            "url": f"{base}/issues/comments/{comment.id}",
            "html_url": f"https://github.invalid/{repo.full_name}/pull/{comment.issue}"
            f"#issuecomment-{comment.id}",
            "issue_url": f"{base}/issues/{comment.issue}",
            "body": comment.body,
            "user": _user(comment.user),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": "NONE",
        },
    )


def _user(login: str) -> Any:
    return merged(
        component(load_spec(), "simple-user"),
        {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"},
    )


def _has_issue(repo: Repo, number: int) -> bool:
    return number in repo.pulls or number in repo.issues


def list_comments(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo, number = _repo(world, match), int(match["number"])
    if repo is None or not _has_issue(repo, number):
        return not_found()
    comments = [comment for comment in repo.comments if comment.issue == number]
    chunk, links = _paged(call, comments, f"{_repo_url(call, repo)}/issues/{number}/comments")
    return Answer(200, [_comment_json(call, repo, comment) for comment in chunk], links)


def _paged(
    call: Call, items: list[Item], url: str, keep: str = ""
) -> tuple[list[Item], dict[str, str]]:
    """The page of `items` the call asks for (`per_page`, `page`), and its Link header."""
    per_page = min(int(call.param("per_page") or DEFAULT_PER_PAGE), MAX_PER_PAGE)
    page = int(call.param("page") or 1)
    links = _links(url, page, per_page, len(items), keep)
    return items[(page - 1) * per_page : page * per_page], {"Link": links} if links else {}


def _links(url: str, page: int, per_page: int, total: int, keep: str = "") -> str:
    """RFC 8288 Link header as GitHub writes it for page-numbered lists; `keep`: the
    request's filters (`branch=main&event=push&`), which every page carries on."""
    last = max(1, -(-total // per_page))
    relations = []
    if page < last:
        relations += [("next", page + 1), ("last", last)]
    if page > 1:
        relations += [("first", 1), ("prev", page - 1)]
    return ", ".join(
        f'<{url}?{keep}per_page={per_page}&page={n}>; rel="{rel}"' for rel, n in relations
    )


def create_comment(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo, number = _repo(world, match), int(match["number"])
    if repo is None or not _has_issue(repo, number):
        return not_found()
    comment = world.add_comment(repo.full_name, number, call.body["body"], world.actor)
    return Answer(201, _comment_json(call, repo, comment))


def _own_comment(world: World, match: re.Match[str]) -> tuple[Repo, Comment] | Answer:
    """The comment the URL names, if it exists and the token's user wrote it."""
    repo = _repo(world, match)
    comment_id = int(match["id"])
    found = [c for c in repo.comments if c.id == comment_id] if repo is not None else []
    if repo is None or not found:
        return not_found()
    if found[0].user != world.actor:
        message = "Resource not accessible by integration"
        return Answer(403, {"message": message, "documentation_url": "https://docs"})
    return repo, found[0]


def edit_comment(world: World, call: Call, match: re.Match[str]) -> Answer:
    owned = _own_comment(world, match)
    if isinstance(owned, Answer):
        return owned
    repo, comment = owned
    comment.body, comment.updated_at = call.body["body"], now_iso()
    return Answer(200, _comment_json(call, repo, comment))


def delete_comment(world: World, call: Call, match: re.Match[str]) -> Answer:
    owned = _own_comment(world, match)
    if isinstance(owned, Answer):
        return owned
    repo, comment = owned
    repo.comments.remove(comment)
    return Answer(204)


def get_authenticated_user(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GET /user: a personal token's user; an installation token (GITHUB_TOKEN, a bot)
    is refused, as GitHub does."""
    if world.actor.endswith("[bot]"):
        message = "Resource not accessible by integration"
        return Answer(403, {"message": message, "documentation_url": "https://docs"})
    user = merged(
        component(load_spec(), "public-user"),
        {"login": world.actor, "type": "User", "user_view_type": "public"},
    )
    return Answer(200, user)


# --- pulls and issues -------------------------------------------------------------------


def get_pull(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo = _repo(world, match)
    pull = repo.pulls.get(int(match["number"])) if repo else None
    if repo is None or pull is None:
        return not_found()
    return Answer(200, _pull_json(call, repo, pull))


def _pull_json(call: Call, repo: Repo, pull: Pull) -> Any:
    base = _repo_url(call, repo)
    closed = pull.state == "closed"
    return merged(
        component(load_spec(), "pull-request"),
        {
            "url": f"{base}/pulls/{pull.number}",
            "id": pull.number,
            "number": pull.number,
            "state": pull.state,
            "title": pull.title,
            "merged": pull.merged,
            "merged_at": now_iso() if pull.merged else None,
            "closed_at": now_iso() if closed else None,
            "issue_url": f"{base}/issues/{pull.number}",
            "comments_url": f"{base}/issues/{pull.number}/comments",
            "statuses_url": f"{base}/statuses/{pull.head_sha}",
            "head": {"sha": pull.head_sha, "ref": pull.head_ref, "label": pull.head_ref},
            "labels": [_label(call, repo, name) for name in pull.labels],
            "user": _user(pull.author),
            "base": {
                "ref": pull.base_ref,
                "label": pull.base_ref,
                "repo": _repo_fields(call, repo.full_name, repo.private),
            },
        },
    )


def _label(call: Call, repo: Repo, name: str) -> dict[str, Any]:
    return {
        "id": len(name),
        "node_id": f"LA_{name}",
        "url": f"{_repo_url(call, repo)}/labels/{name}",
        "name": name,
        "description": None,
        "color": "ededed",
        "default": False,
    }


def _repo_fields(call: Call, full_name: str, private: bool = False) -> dict[str, Any]:
    owner, name = full_name.split("/")
    url = f"{call.base_url}/repos/{full_name}"
    return {
        "full_name": full_name,
        "name": name,
        "owner": {"login": owner},
        "url": url,
        "private": private,
    }


def get_repo(world: World, call: Call, match: re.Match[str]) -> Answer:
    """A repository: publish reads whether it is private (a public PR's comment shows no
    private repository's blocker state)."""
    repo = _repo(world, match)
    if repo is None:
        return not_found()
    fields = _repo_fields(call, repo.full_name, repo.private)
    fields["owner"] = _user(fields["owner"]["login"])
    fields["visibility"] = "private" if repo.private else "public"
    return Answer(200, merged(component(load_spec(), "full-repository"), fields))


def get_issue(world: World, call: Call, match: re.Match[str]) -> Answer:
    """An issue, or a pull request seen as an issue (GitHub numbers both in one space)."""
    repo, number = _repo(world, match), int(match["number"])
    if repo is None or not _has_issue(repo, number):
        return not_found()
    base = _repo_url(call, repo)
    fields: dict[str, Any] = {
        "id": number,
        "number": number,
        "url": f"{base}/issues/{number}",
        "comments_url": f"{base}/issues/{number}/comments",
        "repository_url": base,
    }
    pull = repo.pulls.get(number)
    if pull is not None:
        fields |= {"state": pull.state, "title": pull.title, "pull_request": _pull_link(base, pull)}
    else:
        issue = repo.issues[number]
        fields |= {"state": issue.state, "title": issue.title}
        # GitHub sends null for open issues, but its description's enum omits null (the
        # OpenAPI 3.0 nullable-enum ambiguity), so the fake leaves the field out instead.
        if issue.state_reason is not None:
            fields["state_reason"] = issue.state_reason
    return Answer(200, merged(component(load_spec(), "issue"), fields))


def list_issue_events(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GET .../issues/{n}/events: who labelled and unlabelled a PR, oldest first."""
    repo, number = _repo(world, match), int(match["number"])
    if repo is None or not _has_issue(repo, number):
        return not_found()
    events = [event for event in repo.events if event.issue == number]
    chunk, links = _paged(call, events, f"{_repo_url(call, repo)}/issues/{number}/events")
    return Answer(200, [_event_json(call, repo, event) for event in chunk], links)


def _event_json(call: Call, repo: Repo, event: IssueEvent) -> Any:
    schema = "labeled-issue-event" if event.event == "labeled" else "unlabeled-issue-event"
    return merged(
        component(load_spec(), schema),
        {
            "id": event.id,
            "node_id": f"LE_{event.id}",
            "url": f"{_repo_url(call, repo)}/issues/events/{event.id}",
            "actor": _user(event.actor),
            "event": event.event,
            "created_at": event.created_at,
            "label": {"name": event.label, "color": "ededed"},
        },
    )


def _pull_link(base: str, pull: Pull) -> dict[str, Any]:
    return {
        "url": f"{base}/pulls/{pull.number}",
        "html_url": None,
        "diff_url": None,
        "patch_url": None,
        "merged_at": now_iso() if pull.merged else None,
    }


# --- commit statuses --------------------------------------------------------------------


def create_status(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo = _repo(world, match)
    if repo is None:
        return not_found()
    description = call.body.get("description") or ""
    if len(description) > MAX_STATUS_DESCRIPTION:
        return _validation_failed("description is too long (maximum is 140 characters)")
    status_id = world.new_id()
    stored = {"sha": match["sha"], "id": status_id, **call.body}
    repo.statuses.append(stored)
    body = merged(
        component(load_spec(), "status"),
        {
            "id": status_id,
            "url": f"{_repo_url(call, repo)}/statuses/{match['sha']}",
            "state": call.body["state"],
            "context": call.body.get("context", "default"),
            "description": call.body.get("description"),
            "target_url": call.body.get("target_url"),
            "created_at": now_iso(),
            "updated_at": now_iso(),
        },
    )
    return Answer(201, body)


def _validation_failed(message: str) -> Answer:
    return Answer(
        422, {"message": f"Validation Failed: {message}", "documentation_url": "https://docs"}
    )


# --- workflow runs and artifacts --------------------------------------------------------


def list_workflow_runs(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo = _repo(world, match)
    if repo is None:
        return not_found()
    runs = [run for run in repo.runs if _run_matches(run, match["workflow"], call)]
    runs.sort(key=lambda run: (run.created_at, run.id), reverse=True)  # newest first
    url = f"{_repo_url(call, repo)}/actions/workflows/{match['workflow']}/runs"
    chunk, links = _paged(call, runs, url, _filters(call, RUN_FILTERS))
    body = {"total_count": len(runs), "workflow_runs": [_run_json(call, repo, r) for r in chunk]}
    return Answer(200, body, links)


# The workflow-runs filters the fake honours; GitHub documents more (actor, created, ...).
RUN_FILTERS = ("branch", "event", "status")


def _filters(call: Call, names: tuple[str, ...]) -> str:
    given = [(name, call.param(name)) for name in names]
    return "".join(f"{name}={quote(value, safe='')}&" for name, value in given if value)


def _run_matches(run: Run, workflow: str, call: Call) -> bool:
    wanted_status = call.param("status")
    checks = (
        run.workflow == workflow,
        call.param("branch") in (None, run.branch),
        call.param("event") in (None, run.event),
        wanted_status in (None, run.status, run.conclusion),
    )
    return all(checks)


def _run_json(call: Call, repo: Repo, run: Run) -> Any:
    base = _repo_url(call, repo)
    return merged(
        component(load_spec(), "workflow-run"),
        {
            "id": run.id,
            "name": run.workflow,
            "path": f".github/workflows/{run.workflow}",
            "head_branch": run.branch,
            "head_sha": run.head_sha,
            "head_repository": _repo_fields(call, run.head_repository or repo.full_name),
            "repository": _repo_fields(call, repo.full_name),
            "event": run.event,
            "status": run.status,
            "conclusion": run.conclusion,
            "url": f"{base}/actions/runs/{run.id}",
            "artifacts_url": f"{base}/actions/runs/{run.id}/artifacts",
            "created_at": run.created_at,
            "updated_at": run.created_at,
        },
    )


def compare_commits(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GET .../compare/BASE...HEAD for a branch BASE: where HEAD stands to its history.

    `behind`/`identical`: HEAD is on the branch; `diverged`: a commit the fake knows from
    elsewhere (a fork's run); 404 for a commit nobody pushed, as GitHub answers.
    """
    repo = _repo(world, match)
    base, _, head = unquote(match["basehead"]).partition("...")
    history = repo.branches.get(base) if repo else None
    if repo is None or history is None:
        return not_found()
    if head in history:
        behind = len(history) - 1 - history.index(head)
        status, ahead = ("identical" if behind == 0 else "behind"), 0
    elif any(head == run.head_sha for other in world.repos.values() for run in other.runs):
        status, ahead, behind = "diverged", 1, 1
    else:
        return not_found()
    # `author: null` is what GitHub sends for an unknown user, but the description's
    # nullable oneOf refuses it (the OpenAPI 3.0 ambiguity): the empty object it allows.
    commit = {"sha": head, "author": {}, "committer": {}}
    fields = {
        "status": status,
        "ahead_by": ahead,
        "behind_by": behind,
        "total_commits": ahead,
        "base_commit": commit,
        "merge_base_commit": commit,
    }
    return Answer(200, merged(component(load_spec(), "commit-comparison"), fields))


def list_commits(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GET .../commits?sha=BRANCH: the branch's seeded history, newest first, page by page."""
    repo = _repo(world, match)
    branch = call.param("sha")
    history = repo.branches.get(branch) if repo and branch else None
    if repo is None or history is None:
        return not_found()
    newest_first = list(reversed(history))
    base = _repo_url(call, repo)
    chunk, links = _paged(call, newest_first, f"{base}/commits", _filters(call, ("sha",)))
    # `author: null` as in compare_commits: the empty object the description allows.
    body = [
        merged(
            component(load_spec(), "commit"),
            {"sha": sha, "url": f"{base}/commits/{sha}", "author": {}, "committer": {}},
        )
        for sha in chunk
    ]
    return Answer(200, body, links)


def list_run_artifacts(world: World, call: Call, match: re.Match[str]) -> Answer:
    repo = _repo(world, match)
    if repo is None:
        return not_found()
    run_id = int(match["run_id"])
    found = [artifact for artifact in repo.artifacts if artifact.run_id == run_id]
    url = f"{_repo_url(call, repo)}/actions/runs/{run_id}/artifacts"
    return _artifacts_page(call, repo, found, url)


def list_repo_artifacts(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GET .../actions/artifacts: every run's, newest first (GitHub lists them so)."""
    repo = _repo(world, match)
    if repo is None:
        return not_found()
    newest_first = sorted(repo.artifacts, key=lambda artifact: artifact.id, reverse=True)
    url = f"{_repo_url(call, repo)}/actions/artifacts"
    return _artifacts_page(call, repo, newest_first, url)


def _artifacts_page(call: Call, repo: Repo, artifacts: list[Artifact], url: str) -> Answer:
    """One page of `artifacts` with the `name` filter applied, each with its run."""
    wanted = call.param("name")
    found = [artifact for artifact in artifacts if wanted in (None, artifact.name)]
    chunk, links = _paged(call, found, url, _filters(call, ("name",)))
    body = {"total_count": len(found), "artifacts": [_artifact_json(call, repo, a) for a in chunk]}
    return Answer(200, body, links)


def _artifact_json(call: Call, repo: Repo, artifact: Artifact) -> Any:
    base = _repo_url(call, repo)
    run = next((run for run in repo.runs if run.id == artifact.run_id), None)
    return merged(
        component(load_spec(), "artifact"),
        {
            "id": artifact.id,
            "name": artifact.name,
            "size_in_bytes": len(artifact.archive),
            "expired": artifact.expired,
            "url": f"{base}/actions/artifacts/{artifact.id}",
            "archive_download_url": f"{base}/actions/artifacts/{artifact.id}/zip",
            # GitHub's SHA-256 of the archive, as the download's bytes hash to.
            "digest": "sha256:" + hashlib.sha256(artifact.archive).hexdigest(),
            "workflow_run": None if run is None else _artifact_run(run),
        },
    )


def _artifact_run(run: Run) -> dict[str, Any]:
    return {"id": run.id, "head_branch": run.branch, "head_sha": run.head_sha}


def download_artifact(world: World, call: Call, match: re.Match[str]) -> Answer:
    """GitHub answers with a redirect to short-lived blob storage; so does the fake."""
    repo = _repo(world, match)
    artifact_id = int(match["artifact_id"])
    if repo is None or not any(a.id == artifact_id for a in repo.artifacts):
        return not_found()
    blob_id = artifact_id if match["format"] == "zip" else "missing"
    return Answer(302, None, {"Location": f"{call.blob_url}/_fake/blobs/{blob_id}"})


def blob(world: World, call: Call, match: re.Match[str]) -> Answer:
    """The 'blob storage' behind artifact downloads (not part of the REST API)."""
    wanted = match["blob_id"]
    for repo in world.repos.values():
        for artifact in repo.artifacts:
            if str(artifact.id) == wanted:
                return Answer(200, None, {"Content-Type": "application/zip"}, artifact.archive)
    return Answer(404, None, {"Content-Type": "text/plain"}, b"no such blob")


ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = tuple(
    (method, re.compile(pattern + "$"), handler)
    for method, pattern, handler in (
        ("GET", r"/user", get_authenticated_user),
        ("GET", _REPO + r"/issues/(?P<number>\d+)/comments", list_comments),
        ("POST", _REPO + r"/issues/(?P<number>\d+)/comments", create_comment),
        ("PATCH", _REPO + r"/issues/comments/(?P<id>\d+)", edit_comment),
        ("DELETE", _REPO + r"/issues/comments/(?P<id>\d+)", delete_comment),
        ("GET", _REPO, get_repo),
        ("GET", _REPO + r"/pulls/(?P<number>\d+)", get_pull),
        ("GET", _REPO + r"/issues/(?P<number>\d+)", get_issue),
        ("GET", _REPO + r"/issues/(?P<number>\d+)/events", list_issue_events),
        ("POST", _REPO + r"/statuses/(?P<sha>[0-9a-fA-F]+)", create_status),
        ("GET", _REPO + r"/actions/workflows/(?P<workflow>[^/]+)/runs", list_workflow_runs),
        ("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)/artifacts", list_run_artifacts),
        ("GET", _REPO + r"/actions/artifacts", list_repo_artifacts),
        ("GET", _REPO + r"/compare/(?P<basehead>.+)", compare_commits),
        ("GET", _REPO + r"/commits", list_commits),
        (
            "GET",
            _REPO + r"/actions/artifacts/(?P<artifact_id>\d+)/(?P<format>[^/]+)",
            download_artifact,
        ),
    )
)

BLOB_ROUTE = re.compile(r"/_fake/blobs/(?P<blob_id>[^/]+)$")


def decode_call(
    method: str, path: str, query: str, raw: bytes, base_url: str, blob_url: str
) -> Call:
    body = json.loads(raw) if raw else None
    return Call(method, path, parse_qs(query, keep_blank_values=True), body, base_url, blob_url)

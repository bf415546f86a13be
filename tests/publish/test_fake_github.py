"""The local GitHub itself: spec checking, pagination, auth, and its standalone mode."""

from __future__ import annotations

import json
import subprocess
import sys

import requests
from gh_constants import REPO, TOKEN
from process_groups import group

from kl_bitexact.testing.fake_github import FakeGitHub

AUTH = {"Authorization": f"token {TOKEN}"}


def test_a_request_the_real_api_would_refuse_is_refused_and_recorded(
    fake_github: FakeGitHub,
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7}]}}})
    answer = requests.post(
        f"{fake_github.url}/repos/{REPO}/issues/7/comments",
        json={"text": "body is the field, not text"},
        headers=AUTH,
        timeout=10,
    )
    assert answer.status_code == 422
    assert "'body' is a required property" in answer.json()["message"]
    assert len(fake_github.world.violations) == 1
    fake_github.world.violations.clear()  # seen; the fixture checks for unexpected ones


def test_an_endpoint_the_fake_lacks_is_a_recorded_violation(fake_github: FakeGitHub) -> None:
    answer = requests.get(f"{fake_github.url}/repos/{REPO}/branches", headers=AUTH, timeout=10)
    assert answer.status_code == 404
    expected = f"not implemented by the fake: GET /repos/{REPO}/branches"
    assert fake_github.world.violations == [expected]
    fake_github.world.violations.clear()


def test_comments_are_paged_with_link_headers_like_github(fake_github: FakeGitHub) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7}]}}})
    for index in range(5):
        fake_github.world.add_comment(REPO, 7, f"comment {index}")
    url = f"{fake_github.url}/repos/{REPO}/issues/7/comments"
    page = requests.get(url, params={"per_page": 2, "page": 2}, headers=AUTH, timeout=10)
    assert [c["body"] for c in page.json()] == ["comment 2", "comment 3"]
    assert page.links["next"]["url"] == f"{url}?per_page=2&page=3"
    assert page.links["prev"]["url"] == f"{url}?per_page=2&page=1"
    assert page.links["last"]["url"] == f"{url}?per_page=2&page=3"
    assert page.json()[0]["url"].startswith(fake_github.url)  # PyGithub follows it back here


def test_who_labelled_a_pull_request_is_in_its_events_page_by_page(
    fake_github: FakeGitHub,
) -> None:
    events = [
        {"issue": 7, "event": "labeled", "label": "ok", "actor": "alice"},
        {"issue": 7, "event": "unlabeled", "label": "ok", "actor": "alice"},
        {"issue": 7, "event": "labeled", "label": "ok", "actor": "maint"},
    ]
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7}], "events": events}}})
    fake_github.world.label(REPO, 7, "ok", actor="maint")  # on it already: no event
    assert fake_github.world.repos[REPO].pulls[7].labels == ["ok"]
    url = f"{fake_github.url}/repos/{REPO}/issues/7/events"
    page = requests.get(url, params={"per_page": 2, "page": 2}, headers=AUTH, timeout=10)
    [last] = page.json()
    said = (last["event"], last["label"]["name"], last["actor"]["login"])
    assert said == ("labeled", "ok", "maint")
    assert page.links["prev"]["url"] == f"{url}?per_page=2&page=1"
    first = requests.get(url, params={"per_page": 2}, headers=AUTH, timeout=10).json()
    assert [e["event"] for e in first] == ["labeled", "unlabeled"]
    assert first[0]["id"] < first[1]["id"] < last["id"]  # oldest first, ids grow


def test_a_wrong_token_gets_bad_credentials(fake_github: FakeGitHub) -> None:
    answer = requests.get(
        f"{fake_github.url}/repos/{REPO}/pulls/1",
        headers={"Authorization": "token wrong"},
        timeout=10,
    )
    assert answer.status_code == 401
    assert answer.json()["message"] == "Bad credentials"


def test_runs_standalone_with_seed_faults_and_state_over_http() -> None:
    module = "kl_bitexact.testing.fake_github"
    command = [sys.executable, "-m", module, "--port", "0", "--token", "standalone-secret"]
    with group(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("fake GitHub listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        seed = {"repos": {"o/r": {"pulls": [{"number": 3, "head_sha": "ab" * 20}]}}}
        requests.post(f"{url}/_fake/seed", json=seed, timeout=10).raise_for_status()
        fault = [{"method": "GET", "path": "/pulls/3$", "status": 502, "times": 1}]
        requests.post(f"{url}/_fake/faults", json=fault, timeout=10).raise_for_status()
        auth = {"Authorization": "token standalone-secret"}
        assert requests.get(f"{url}/repos/o/r/pulls/3", headers=auth, timeout=10).status_code == 502
        pull = requests.get(f"{url}/repos/o/r/pulls/3", headers=auth, timeout=10).json()
        assert pull["head"]["sha"] == "ab" * 20
        state = requests.get(f"{url}/_fake/state", timeout=10).json()
        assert [r["status"] for r in state["requests"]] == [502, 200]
        assert state["violations"] == []
        assert "standalone-secret" not in json.dumps(state)


def test_an_undocumented_404_is_checked_as_githubs_basic_error(fake_github: FakeGitHub) -> None:
    url = f"{fake_github.url}/repos/{REPO}/issues/comments/424242"
    answer = requests.delete(url, headers=AUTH, timeout=10)
    assert answer.status_code == 404  # GitHub's description lists only 204 here
    assert answer.json()["message"] == "Not Found"


def test_a_malformed_control_request_is_an_answer_not_a_dropped_connection(
    fake_github: FakeGitHub,
) -> None:
    answer = requests.post(f"{fake_github.url}/_fake/faults", data=b"{not json", timeout=10)
    assert answer.status_code == 500
    assert "JSONDecodeError" in answer.json()["message"]
    assert len(fake_github.world.violations) == 1
    fake_github.world.violations.clear()

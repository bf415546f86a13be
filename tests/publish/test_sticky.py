"""The sticky comment against the local GitHub: create, edit, skip, paging, races."""

from __future__ import annotations

import threading
from urllib.parse import parse_qs

import pytest
from gh_constants import FAST, REPO, TOKEN
from github import GithubException

from kl_bitexact.publish import sticky
from kl_bitexact.publish.client import Target, connect
from kl_bitexact.testing.fake_github import FakeGitHub

MARK = "<!-- kl-bitexact:bitexact -->"
BOT = "github-actions[bot]"


@pytest.fixture
def pull(fake_github: FakeGitHub, target: Target) -> sticky.PullLike:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7}]}}})
    return connect(target, TOKEN, FAST).client.get_repo(REPO).get_pull(7)


def _bodies(fake_github: FakeGitHub) -> list[str]:
    return [comment.body for comment in fake_github.world.repos[REPO].comments]


def _writes(fake_github: FakeGitHub) -> list[str]:
    return [r["method"] for r in fake_github.world.requests if r["method"] != "GET"]


def test_first_creates_second_edits_third_writes_nothing(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    first = sticky.upsert(pull, "bitexact", f"{MARK}\nKL 0.0", author=BOT)
    assert first.action == "created"
    second = sticky.upsert(pull, "bitexact", f"{MARK}\nKL 1e-9", author=BOT)
    assert (second.action, second.comment_id) == ("updated", first.comment_id)
    third = sticky.upsert(pull, "bitexact", f"{MARK}\nKL 1e-9", author=BOT)
    assert (third.action, third.comment_id) == ("unchanged", first.comment_id)
    assert _bodies(fake_github) == [f"{MARK}\nKL 1e-9"]
    assert _writes(fake_github) == ["POST", "PATCH"]


def test_the_marker_is_found_on_page_three_of_250_comments(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    for index in range(250):
        if index == 220:
            fake_github.world.add_comment(REPO, 7, f"{MARK}\nold report", BOT)
        else:
            fake_github.world.add_comment(REPO, 7, f"review comment {index}")
    outcome = sticky.upsert(pull, "bitexact", f"{MARK}\nnew report", author=BOT)
    assert outcome.action == "updated"
    lists = [parse_qs(r["query"]) for r in fake_github.world.requests if r["method"] == "GET"]
    pages = [(query["per_page"], query.get("page")) for query in lists[1:]]  # after the PR
    assert pages == [(["100"], None), (["100"], ["2"]), (["100"], ["3"])]
    assert _writes(fake_github) == ["PATCH"]
    assert _bodies(fake_github)[220] == f"{MARK}\nnew report"


def test_other_keys_and_quoted_markers_are_left_alone(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    fake_github.world.add_comment(REPO, 7, "<!-- kl-bitexact:nightly -->\nother workflow")
    fake_github.world.add_comment(REPO, 7, f"> {MARK}\n> quoted by a reviewer")
    assert sticky.upsert(pull, "bitexact", "report", author=BOT).action == "created"
    assert _bodies(fake_github)[2] == f"{MARK}\nreport"  # the marker is added when missing


def test_duplicates_left_by_an_old_race_are_removed(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    oldest = fake_github.world.add_comment(REPO, 7, f"{MARK}\na", BOT)
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nb", BOT)
    outcome = sticky.upsert(pull, "bitexact", f"{MARK}\nc", author=BOT)
    assert (outcome.action, outcome.comment_id, len(outcome.deleted)) == ("updated", oldest.id, 1)
    assert _bodies(fake_github) == [f"{MARK}\nc"]


def test_two_racing_publishers_end_with_one_comment(
    fake_github: FakeGitHub, target: Target
) -> None:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7}]}}})
    # Both publishers list (finding nothing) before either comment is created.
    fake_github.hold("POST", r"/issues/7/comments$", parties=2)
    outcomes: list[sticky.Outcome] = []

    def publish(body: str) -> None:
        pull = connect(target, TOKEN, FAST).client.get_repo(REPO).get_pull(7)
        outcomes.append(sticky.upsert(pull, "bitexact", f"{MARK}\n{body}", author=BOT))

    racers = [threading.Thread(target=publish, args=(f"run {n}",)) for n in (1, 2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=30)
    posts = [r for r in fake_github.world.requests if r["method"] == "POST"]
    assert len(posts) == 2  # the race really happened
    assert "DELETE" in _writes(fake_github)  # and was cleaned up, not avoided
    assert len(_bodies(fake_github)) == 1
    assert {outcome.comment_id for outcome in outcomes} == {
        fake_github.world.repos[REPO].comments[0].id
    }


def test_history_lines_accumulate_and_do_not_count_as_a_change(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    sticky.upsert(pull, "bitexact", f"{MARK}\nv1", history_line="updated for aaaa111", author=BOT)
    sticky.upsert(pull, "bitexact", f"{MARK}\nv2", history_line="updated for bbbb222", author=BOT)
    again = sticky.upsert(
        pull, "bitexact", f"{MARK}\nv2", history_line="updated for cccc333", author=BOT
    )
    assert again.action == "unchanged"
    (body,) = _bodies(fake_github)
    assert sticky.content(body) == f"{MARK}\nv2"
    assert "- updated for aaaa111\n- updated for bbbb222\n</details>" in body


def test_history_keeps_the_last_lines_only() -> None:
    body = None
    for n in range(sticky.MAX_HISTORY_LINES + 5):
        body = sticky.compose("report", body, f"update {n}")
    assert body is not None
    assert "- update 4\n" not in body and "- update 5\n" in body


def test_a_hostile_key_cannot_close_the_hidden_marker(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    sticky.upsert(pull, "evil --> <script>", "report", author=BOT)
    (body,) = _bodies(fake_github)
    first_line = body.splitlines()[0]
    assert first_line.startswith("<!-- kl-bitexact:") and first_line.count("-->") == 1
    assert sticky.upsert(pull, "evil --> <script>", "report", author=BOT).action == "unchanged"


def test_a_human_comment_starting_with_the_marker_is_not_ours(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nI can type your marker too", "mallory")
    assert sticky.upsert(pull, "bitexact", f"{MARK}\nreport", author=BOT).action == "created"
    assert sticky.upsert(pull, "bitexact", f"{MARK}\nreport 2", author=BOT).action == "updated"
    assert _bodies(fake_github) == [f"{MARK}\nI can type your marker too", f"{MARK}\nreport 2"]


def test_with_a_personal_token_the_author_is_named(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    fake_github.world.actor = "release-robot"  # the token's user
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nposted by a PAT", "release-robot")
    outcome = sticky.upsert(pull, "bitexact", f"{MARK}\nnew", author="release-robot")
    assert outcome.action == "updated"
    assert _bodies(fake_github) == [f"{MARK}\nnew"]


def test_editing_someone_elses_comment_is_refused_like_github_does(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nhuman", "mallory")
    with pytest.raises(GithubException) as refused:  # why the author filter exists
        sticky.upsert(pull, "bitexact", "report", author="mallory")
    assert refused.value.status == 403


def test_another_bots_marker_comment_is_not_ours(
    fake_github: FakeGitHub, pull: sticky.PullLike
) -> None:
    # Issue 14, case 6: "any Bot" counted dependabot's comment as ours; deleting it was
    # refused (403) on every re-run.
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nquoted by a bot", "dependabot[bot]")
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nour old one", BOT)
    fake_github.world.add_comment(REPO, 7, f"{MARK}\nanother", "dependabot[bot]")
    outcome = sticky.upsert(pull, "bitexact", f"{MARK}\nreport", author=BOT)
    assert outcome.action == "updated" and outcome.deleted == ()
    assert _bodies(fake_github) == [
        f"{MARK}\nquoted by a bot",
        f"{MARK}\nreport",
        f"{MARK}\nanother",
    ]


def test_the_publishing_login_is_the_tokens_own(fake_github: FakeGitHub, target) -> None:
    client = connect(target, TOKEN).client
    assert sticky.publishing_login(client, None) == BOT  # GITHUB_TOKEN: GET /user refused
    fake_github.world.actor = "release-robot"  # a personal access token
    assert sticky.publishing_login(client, None) == "release-robot"
    assert sticky.publishing_login(client, "my-app[bot]") == "my-app[bot]"

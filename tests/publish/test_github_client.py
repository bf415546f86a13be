"""The PyGithub factory: where it points, how it retries, and what its errors say."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from gh_constants import FAST, REPO, TOKEN

from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish import baseline_fetch
from kl_bitexact.publish.client import (
    ClientSettings,
    Target,
    connect,
    open_session,
    pr_from_event,
    resolve_target,
)
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run
from kl_bitexact.testing.openapi_check import SpecChecker

SECONDARY = {
    "message": "You have exceeded a secondary rate limit. Please wait a few minutes before "
    "you try again.",
    "documentation_url": "https://docs.github.com/rest",
}
PRIMARY = {
    "message": "API rate limit exceeded for installation ID 1.",
    "documentation_url": "https://docs.github.com/rest",
}


def _head_sha(
    fake_github: FakeGitHub, target: Target, settings: ClientSettings = FAST, token: str = TOKEN
) -> str:
    fake_github.world.seed({"repos": {REPO: {"pulls": [{"number": 7, "head_sha": "c" * 40}]}}})
    session = connect(target, token, settings)
    with session.translated("reading the pull request"):
        sha: str = session.client.get_repo(REPO).get_pull(7).head.sha
    return sha


def _statuses(fake_github: FakeGitHub) -> list[int]:
    return [entry["status"] for entry in fake_github.world.requests]


def test_a_502_is_retried_until_it_succeeds(
    fake_github: FakeGitHub, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 502, {"message": "Server Error"}, times=2))
    assert _head_sha(fake_github, target) == "c" * 40
    assert _statuses(fake_github) == [502, 502, 200]
    # Each retry says why and how long it waits (on stderr: stdout is for later steps).
    retry = "kl-bitexact: GitHub answered 502 for GET /repos/octo/engine/pulls/7; retrying in"
    assert capsys.readouterr().err.splitlines() == [
        f"{retry} 0.0 s (retry 1 of 3)",
        f"{retry} 0.0 s (retry 2 of 3)",
    ]


def test_a_5xx_that_never_ends_is_a_clear_error(fake_github: FakeGitHub, target: Target) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 503, {"message": "Unavailable"}, times=99))
    with pytest.raises(GitHubError, match="GitHub answered 503 while reading the pull request"):
        _head_sha(fake_github, target)
    assert _statuses(fake_github) == [503] * (FAST.retries + 1)


def test_a_secondary_rate_limit_waits_for_retry_after(
    fake_github: FakeGitHub, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 403, SECONDARY, {"Retry-After": "1"}))
    started = time.monotonic()
    assert _head_sha(fake_github, target) == "c" * 40
    assert time.monotonic() - started >= 1.0  # honoured, not retried at once
    assert _statuses(fake_github) == [403, 200]
    assert capsys.readouterr().err == (
        "kl-bitexact: GitHub answered 403 (rate limit) for GET /repos/octo/engine/pulls/7; "
        "retrying in 1.0 s (retry 1 of 3)\n"
    )


def test_a_primary_rate_limit_with_a_near_reset_is_waited_out(
    fake_github: FakeGitHub, target: Target
) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 403, PRIMARY, reset_in=0))
    assert _head_sha(fake_github, target) == "c" * 40
    assert _statuses(fake_github) == [403, 200]


def test_a_primary_rate_limit_with_a_far_reset_fails_at_once_and_says_so(
    fake_github: FakeGitHub, target: Target
) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 403, PRIMARY, reset_in=3600))
    started = time.monotonic()
    with pytest.raises(GitHubError, match=r"rate limit reached .* resets in 36\d\d s") as caught:
        _head_sha(fake_github, target)
    assert time.monotonic() - started < 5
    assert "KL_BITEXACT_GITHUB_MAX_RATE_WAIT" in (caught.value.hint or "")


def test_a_missing_pull_request_names_the_fix(fake_github: FakeGitHub, target: Target) -> None:
    session = connect(target, TOKEN, FAST)
    expected = "404 while reading #99: Not Found"
    with pytest.raises(GitHubError, match=expected) as caught, session.translated("reading #99"):
        session.client.get_repo(REPO).get_pull(99).head  # noqa: B018 - the read is the request
    assert "token can see the repository" in (caught.value.hint or "")


def test_bad_credentials_are_not_retried_and_never_echo_the_token(
    fake_github: FakeGitHub,
) -> None:
    wrong = "ghp_this_token_is_wrong_and_must_not_leak"
    target = Target(fake_github.url, REPO, 7)
    with pytest.raises(GitHubError) as caught:
        _head_sha(fake_github, target, token=wrong)
    assert "401" in caught.value.message and "Bad credentials" in caught.value.message
    assert wrong not in f"{caught.value.message} {caught.value.hint} {caught.value!r}"
    assert _statuses(fake_github) == [401]


def test_an_unreachable_api_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    session = connect(Target(f"http://127.0.0.1:{port}", REPO, 7), TOKEN, FAST)
    expected = "GitHub unreachable while reading the pull request: Connection refused$"
    with pytest.raises(GitHubError, match=expected), session.translated("reading the pull request"):
        session.client.get_repo(REPO).get_pull(7).head  # noqa: B018
    announced = capsys.readouterr().err.splitlines()
    assert len(announced) == FAST.retries
    assert announced[0].startswith(
        "kl-bitexact: GitHub unreachable (Connection refused) for GET /repos/octo/engine/pulls/7; "
        "retrying in "
    )


def test_the_token_is_in_the_session_alone_and_not_in_its_repr() -> None:
    session = open_session(_env())
    assert TOKEN not in repr(session)
    assert TOKEN not in repr(session.target)
    assert session.redact(f"Bearer {TOKEN} refused") == "Bearer *** refused"


# --- where to talk to -------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    return {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO, **extra}


def _event_env(tmp_path: Path, event: dict[str, object]) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    return _env(GITHUB_EVENT_PATH=str(path))


def test_target_comes_from_the_actions_environment(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}}))
    env = _env(GITHUB_API_URL="https://ghe.example.com/api/v3/", GITHUB_EVENT_PATH=str(event))
    target = resolve_target(env)
    assert (target.api_url, target.repository, target.pr_number) == (
        "https://ghe.example.com/api/v3",
        REPO,
        42,
    )
    assert open_session(env).target == target


def test_options_win_over_the_environment() -> None:
    target = resolve_target(_env(), repository="other/repo", pr_number=5, api_url="http://x")
    assert (target.repository, target.pr_number, target.api_url) == ("other/repo", 5, "http://x")


@pytest.mark.parametrize(
    ("event", "number"),
    [
        ({"issue": {"number": 8, "pull_request": {"url": "u"}}}, 8),
        ({"issue": {"number": 8}}, None),  # a comment on a plain issue
        ({"workflow_run": {"pull_requests": [{"number": 9}]}}, 9),
        ({"workflow_run": {"pull_requests": []}}, None),  # fork PRs are not listed
        ({"push": {}}, None),
    ],
)
def test_pr_number_from_each_event_kind(
    tmp_path: Path, event: dict[str, object], number: int | None
) -> None:
    assert resolve_target(_event_env(tmp_path, event)).pr_number == number


def test_missing_token_and_bad_repository_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no GitHub token"):
        open_session({"GITHUB_REPOSITORY": REPO})
    with pytest.raises(ConfigError, match="no GitHub token"):  # asked for first
        open_session({"GITHUB_REPOSITORY": "nonsense"})
    with pytest.raises(ConfigError, match=r"'nonsense' \(from --repo or GITHUB_REPOSITORY\)"):
        resolve_target(_env(GITHUB_REPOSITORY="nonsense"))
    with pytest.raises(ConfigError, match="pass --repo OWNER/NAME or set GITHUB_REPOSITORY"):
        open_session({"GITHUB_TOKEN": TOKEN})
    broken = tmp_path / "event.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the GitHub event file"):
        resolve_target(_env(GITHUB_EVENT_PATH=str(broken)))


def test_settings_from_env_and_their_errors() -> None:
    settings = ClientSettings.from_env({"KL_BITEXACT_GITHUB_BACKOFF": "0.5"})
    assert settings.backoff_factor == 0.5
    assert settings.retries == ClientSettings().retries
    with pytest.raises(ConfigError, match="KL_BITEXACT_GITHUB_RETRIES='many' is not a number"):
        ClientSettings.from_env({"KL_BITEXACT_GITHUB_RETRIES": "many"})
    with pytest.raises(ConfigError, match="must not be negative"):
        ClientSettings.from_env({"KL_BITEXACT_GITHUB_TIMEOUT": "-1"})


def test_github_enterprise_server_api_prefix_works(spec_checker: SpecChecker) -> None:
    server = FakeGitHub(TOKEN, checker=spec_checker, prefix="/api/v3").start()
    try:
        server.world.seed({"repos": {REPO: {"pulls": [{"number": 7, "head_sha": "e" * 40}]}}})
        base = r.Results(run=r.RunInfo(commit="b" * 40))
        files = {"results.json": results_io.dumps(base).encode()}
        server.world.add_run(REPO, Run(id=3, workflow="ci.yml"), files, "kl-bitexact-results")
        env = _env(GITHUB_API_URL=f"{server.root}/api/v3")
        session = open_session(env, settings=FAST, pr_number=7)
        assert session.client.get_repo(REPO).get_pull(7).head.sha == "e" * 40
        fetched = baseline_fetch.fetch(session, REPO, "ci.yml", "main", "kl-bitexact-results")
        assert fetched.results is not None, fetched.unavailable
        assert fetched.results.run.commit == "b" * 40
        assert all(e["path"].startswith("/repos/") for e in server.world.requests)
    finally:
        server.stop()
    assert server.world.violations == []


def test_a_429_secondary_limit_is_retried_too(fake_github: FakeGitHub, target: Target) -> None:
    fake_github.add_fault(Fault("GET", r"/pulls/7$", 429, SECONDARY))
    assert _head_sha(fake_github, target) == "c" * 40
    assert _statuses(fake_github) == [429, 200]


@pytest.mark.parametrize(
    ("event", "sha"),
    [
        ({"pull_request": {"number": 7, "head": {"sha": "a" * 40}}}, "a" * 40),
        ({"workflow_run": {"head_sha": "b" * 40, "pull_requests": [{"number": 7}]}}, "b" * 40),
        ({"pull_request": {"number": 7, "head": {"sha": "not-a-sha"}}}, None),
        ({"issue": {"number": 7, "pull_request": {}}}, None),  # the PR's current head, later
    ],
)
def test_the_tested_head_sha_comes_from_the_event(
    tmp_path: Path, event: dict[str, object], sha: str | None
) -> None:
    assert resolve_target(_event_env(tmp_path, event)).head_sha == sha
    other_pr = resolve_target(_event_env(tmp_path, event), pr_number=8)
    assert other_pr.head_sha is None  # the event's head belongs to another PR
    with pytest.raises(ConfigError, match=r"--sha 'abc': not a full commit SHA"):
        resolve_target(_env(), head_sha="abc")


def test_pr_from_event_reads_the_event_file(tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    path.write_text(json.dumps({"pull_request": {"number": 3}}))
    assert pr_from_event(str(path)) == 3
    assert pr_from_event(None) is None


def test_a_secondary_limit_that_outlasts_the_retries_says_so(
    fake_github: FakeGitHub, target: Target
) -> None:
    limit = Fault("GET", r"/pulls/7$", 403, SECONDARY, {"Retry-After": "0"}, times=99)
    fake_github.add_fault(limit)
    with pytest.raises(GitHubError, match="GitHub rate limit while reading") as caught:
        _head_sha(fake_github, target)
    assert caught.value.hint == "re-run the job in a few minutes"
    assert _statuses(fake_github) == [403] * (FAST.retries + 1)

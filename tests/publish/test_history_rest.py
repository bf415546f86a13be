"""The history's listing over the REST reader (issue 40): few requests, no PyGithub, and the
token kept to the API's host: never sent elsewhere, never in a message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gh_constants import FAST, FAST_ENV, REPO, TOKEN
from history_runs import commit, main_run_bytes, when

from kl_bitexact.compare.history import History
from kl_bitexact.publish import history_fetch, history_listing
from kl_bitexact.publish.baseline_fetch import Wanted
from kl_bitexact.publish.client import Target, connect
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run

NAME = "kl-bitexact-results"
RUNS_PATH = f"/repos/{REPO}/actions/workflows/ci.yml/runs"


def _seed(fake_github: FakeGitHub, count: int) -> None:
    for i in range(count):
        run = Run(id=500 + i, workflow="ci.yml", head_sha=commit(i), created_at=when(i))
        fake_github.world.add_run(REPO, run, {"results.json": main_run_bytes(i)}, NAME)


def _fetch(target: Target, cache: Path, runs: int = 20) -> History:
    session = connect(target, TOKEN, FAST)
    wanted = Wanted(REPO, "ci.yml", "main", NAME)
    with session:
        return history_fetch.fetch(
            session, wanted, cache, history_fetch.Bounds(runs=runs), say=lambda line: None
        )


def _paths(fake_github: FakeGitHub) -> list[str]:
    return [entry["path"] for entry in fake_github.world.requests]


class _Elsewhere(ThreadingHTTPServer):
    """Another host: records every request that reaches it, and its Authorization header."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.seen: list[tuple[str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Recorder(BaseHTTPRequestHandler):
    server: _Elsewhere

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"total_count": 0, "workflow_runs": [], "artifacts": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def elsewhere() -> Iterator[_Elsewhere]:
    server = _Elsewhere()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_a_warm_fetch_asks_three_lists_and_reads_the_rest_from_the_cache(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 20)
    cold = _fetch(target, tmp_path)
    before = len(fake_github.world.requests)
    warm = _fetch(target, tmp_path)
    asked = _paths(fake_github)[before:]
    assert asked == [RUNS_PATH, f"/repos/{REPO}/actions/artifacts", f"/repos/{REPO}/commits"]
    assert [run.run_id for run in warm.runs] == list(range(500, 520))
    assert warm.runs == cold.runs and warm.notes == cold.notes


def test_a_run_the_repository_listing_does_not_reach_is_asked_on_its_own(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(fake_github, 3)
    # Pull requests' runs upload the same name, newer than the base branch's: the listing's
    # window (here 2 artifacts) holds none of main's, so each run is asked about alone.
    for n in range(2):
        pr = Run(id=900 + n, workflow="ci.yml", event="pull_request", branch="feature")
        fake_github.world.add_run(REPO, pr, {"results.json": main_run_bytes(0)}, NAME)
    monkeypatch.setattr(history_listing, "LISTED_ARTIFACTS", 2)
    history = _fetch(target, tmp_path)
    assert [run.run_id for run in history.runs] == [500, 501, 502]
    asked = [path for path in _paths(fake_github) if path.endswith("/artifacts")]
    assert asked[0] == f"/repos/{REPO}/actions/artifacts"
    assert sorted(asked[1:]) == [
        f"/repos/{REPO}/actions/runs/{n}/artifacts" for n in (500, 501, 502)
    ]


def test_a_run_without_the_artifact_is_passed_over_once_the_listing_is_complete(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 2)
    fake_github.world.repos[REPO].artifacts[0].expired = True
    history = _fetch(target, tmp_path)
    assert [run.run_id for run in history.runs] == [501]
    assert history.notes[-1] == (
        f"passed over: run 500: no {NAME} artifact (expired, or the run uploaded none)"
    )
    assert not any("/runs/500/" in path for path in _paths(fake_github))  # the listing said


def test_a_link_to_another_host_is_not_followed_and_gets_no_token(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, elsewhere: _Elsewhere
) -> None:
    _seed(fake_github, 2)
    page = {"total_count": 40, "workflow_runs": []}
    link = f'<{elsewhere.url}{RUNS_PATH}?page=2>; rel="next"'
    fake_github.add_fault(Fault("GET", "/runs$", 200, page, {"Link": link}))
    history = _fetch(target, tmp_path)
    assert history.runs == () and elsewhere.seen == []
    (note,) = history.notes
    assert note.startswith(
        "fetching the history failed: GitHub pointed to another host (127.0.0.1) while listing"
    )


@pytest.mark.parametrize("status", [301, 302, 307])
def test_a_redirect_to_another_host_is_not_followed_and_one_within_the_api_is(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, elsewhere: _Elsewhere, status: int
) -> None:
    _seed(fake_github, 2)
    away = {"Location": f"{elsewhere.url}{RUNS_PATH}"}
    fake_github.add_fault(Fault("GET", "/runs$", status, {"message": "Moved"}, away))
    history = _fetch(target, tmp_path / "away")
    assert history.runs == () and elsewhere.seen == []
    assert "pointed to another host" in history.notes[0]
    # A renamed repository: GitHub redirects within the API, and the token goes along.
    here = {"Location": f"{fake_github.url}{RUNS_PATH}?branch=main&status=completed"}
    fake_github.add_fault(Fault("GET", "/runs$", status, {"message": "Moved"}, here))
    history = _fetch(target, tmp_path / "here")
    assert [run.run_id for run in history.runs] == [500, 501]


def test_errors_never_carry_the_token(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(fake_github, 1)
    echoed = {"message": f"token {TOKEN} is not allowed here"}
    fake_github.add_fault(Fault("GET", "/runs$", 403, echoed))
    history = _fetch(target, tmp_path)
    (note,) = history.notes
    assert note == (
        "fetching the history failed: GitHub answered 403 while listing the runs of ci.yml on "
        "main: token *** is not allowed here"
    )
    wrong = "ghp_wrong_token_that_must_not_leak"
    session = connect(target, wrong, FAST)
    with session:
        refused = history_fetch.fetch(session, Wanted(REPO, "ci.yml", "main", NAME), tmp_path)
    assert "401" in refused.notes[0] and wrong not in refused.notes[0]
    assert TOKEN not in repr(session.rest) and wrong not in repr(session.rest)
    assert TOKEN not in capsys.readouterr().err


def test_5xx_and_rate_limits_are_retried_and_said_as_the_pygithub_client_does(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(fake_github, 1)
    fake_github.add_fault(Fault("GET", "/runs$", 502, {"message": "Server Error"}, times=2))
    limit = {"message": "You have exceeded a secondary rate limit."}
    fake_github.add_fault(Fault("GET", "/artifacts$", 403, limit, {"Retry-After": "0"}))
    history = _fetch(target, tmp_path)
    assert [run.run_id for run in history.runs] == [500]
    assert capsys.readouterr().err.splitlines() == [
        f"kl-bitexact: GitHub answered 502 for GET {RUNS_PATH}; retrying in 0.0 s (retry 1 of 3)",
        f"kl-bitexact: GitHub answered 502 for GET {RUNS_PATH}; retrying in 0.0 s (retry 2 of 3)",
        f"kl-bitexact: GitHub answered 403 (rate limit) for GET /repos/{REPO}/actions/artifacts; "
        "retrying in 0.0 s (retry 1 of 3)",
    ]
    primary = {"message": "API rate limit exceeded for installation ID 1."}
    fake_github.add_fault(Fault("GET", "/runs$", 403, primary, reset_in=3600))
    far = _fetch(target, tmp_path)  # an hour off: not waited for, said at once
    assert re.fullmatch(
        "fetching the history failed: GitHub rate limit reached while listing the runs of "
        r"ci.yml on main; it resets in 3[56]\d\d s",
        far.notes[0],
    )


def test_an_answer_of_another_shape_fails_the_listing_and_says_so(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 1)
    fake_github.add_fault(Fault("GET", "/runs$", 200, {"workflow_runs": [{"id": "500"}]}))
    history = _fetch(target, tmp_path)
    assert history.runs == () and history.notes == (
        "fetching the history failed: GitHub answered something other than its API describes "
        "while listing the runs of ci.yml on main (id is not an integer)",
    )


def test_a_history_process_never_imports_pygithub_and_a_warm_one_not_requests(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    _seed(fake_github, 3)
    env = {**os.environ, **FAST_ENV, "GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_github.url}
    argv = ["history", "--repo", REPO, "--workflow", "ci.yml", "--history-cache", str(tmp_path)]
    probe = (
        "import sys; from kl_bitexact.cli import main; code = main(sys.argv[1:]); "
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'github', 'requests', "
        "'urllib3'}); print('LOADED', loaded, file=sys.stderr); sys.exit(code)"
    )
    loaded = []
    for _ in range(2):  # cold (downloads the blobs over requests, no token), then warm
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        loaded.append(done.stderr.splitlines()[-1])
    assert loaded == ["LOADED ['requests', 'urllib3']", "LOADED []"]
    assert "hicache::decode_cache_hit_ratio" in done.stdout


def test_a_proxy_the_environment_names_is_asked_and_no_proxy_goes_direct(
    fake_github: FakeGitHub,
    target: Target,
    tmp_path: Path,
    elsewhere: _Elsewhere,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _seed(fake_github, 1)
    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("http_proxy", elsewhere.url)  # as requests honours it for PyGithub
    through = _fetch(target, tmp_path / "proxied")
    (asked, authorization) = elsewhere.seen[0]
    assert asked.startswith(f"{fake_github.url}{RUNS_PATH}?")  # the whole URL, to the proxy
    assert authorization == f"Bearer {TOKEN}" and through.runs == ()
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")  # the API, and its blob storage
    direct = _fetch(target, tmp_path / "direct")
    assert len(elsewhere.seen) == 1 and [run.run_id for run in direct.runs] == [500]

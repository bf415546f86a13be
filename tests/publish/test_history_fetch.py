"""Fetching the history: the base branch's last N runs, their artifacts once each, bounded
and refused as the baseline's are."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import time
import zipfile
from pathlib import Path

import process_groups
import pytest
import requests
from gh_constants import FAST, FAST_ENV, REPO, TOKEN
from history_runs import FLAKY_ID, RUNS, STEADY_ID, commit, kl_test, main_run_bytes, results, when

from kl_bitexact.compare import history_dir
from kl_bitexact.compare.history import History
from kl_bitexact.publish import baseline_fetch, history_fetch
from kl_bitexact.publish.baseline_fetch import Wanted
from kl_bitexact.publish.client import Target, connect
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run

NAME = "kl-bitexact-results"


def _seed(fake_github: FakeGitHub, count: int = RUNS) -> None:
    for i in range(count):
        run = Run(
            id=500 + i,
            workflow="ci.yml",
            head_sha=commit(i),
            created_at=when(i),
            # A run whose gate failed is exactly what the history must see.
            conclusion="failure" if i % 2 else "success",
        )
        fake_github.world.add_run(REPO, run, {"results.json": main_run_bytes(i)}, NAME)


def _fetch(
    target: Target,
    cache: Path,
    bounds: history_fetch.Bounds | None = None,
    events: tuple[str, ...] = ("push",),
    said: list[str] | None = None,
) -> History:
    session = connect(target, TOKEN, FAST)
    wanted = Wanted(REPO, "ci.yml", "main", NAME, events)
    say = said.append if said is not None else (lambda line: None)
    return history_fetch.fetch(session, wanted, cache, bounds, say=say)


def _blob_requests(fake_github: FakeGitHub) -> int:
    return sum(1 for entry in fake_github.world.requests if entry["path"].endswith("/zip"))


def test_the_last_runs_of_any_conclusion_oldest_first_with_progress(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 25)
    said: list[str] = []
    history = _fetch(target, tmp_path, history_fetch.Bounds(runs=20), said=said)
    assert [run.commit for run in history.runs] == [commit(i) for i in range(5, 25)]
    assert [run.run_id for run in history.runs] == list(range(505, 525))
    flaky = history.of(FLAKY_ID)
    assert flaky is not None and (flaky.failed, flaky.present) == (10, 20)
    assert history.standing(STEADY_ID).value == "new"
    assert said[0].startswith("20 runs of main: 0 cached, downloading 20 (")
    assert said[0].endswith("; at most 536.9 MB and 300 s)")
    assert said[1].startswith("run 524 (1 of 20, ") and said[-2].startswith("run 505 (20 of 20, ")
    assert (
        said[-1]
        == f"cached in {tmp_path}/octo_engine/ci.yml/main/{NAME} (--history-dir reads it offline)"
    )
    assert history.notes == ()


def test_a_second_fetch_downloads_nothing_and_the_cache_reads_offline(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github)
    first = _fetch(target, tmp_path)
    assert _blob_requests(fake_github) == RUNS
    said: list[str] = []
    second = _fetch(target, tmp_path, said=said)
    assert _blob_requests(fake_github) == RUNS and said == []  # all cached: nothing to say
    # Per fetch: the runs, the repository's artifacts of the name (their digests), and the
    # branch's history once (no `compare` per run: every commit is among the branch's newest).
    paths = [entry["path"] for entry in fake_github.world.requests]
    assert sum("/compare/" in path for path in paths) == 0
    assert sum(path.endswith("/commits") for path in paths) == 2
    assert [r.commit for r in second.runs] == [r.commit for r in first.runs]
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME))
    assert directory == tmp_path / "octo_engine" / "ci.yml" / "main" / NAME
    offline = history_dir.load(directory, RUNS)
    assert [r.commit for r in offline.runs] == [r.commit for r in first.runs]
    assert offline.of(FLAKY_ID) == first.of(FLAKY_ID)


def test_a_tampered_cache_is_not_believed(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github)
    _fetch(target, tmp_path)
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME))
    # A PR's code on a self-hosted runner rewrites a cached run: the steady test "failed".
    poisoned = results_io.dumps(results(kl_test(STEADY_ID, red=True), sha=commit(3)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("results.json", poisoned)
    (directory / "run-503.zip").write_bytes(buffer.getvalue())
    (directory / "run-503.json").write_text(poisoned)
    history = _fetch(target, tmp_path)
    assert _blob_requests(fake_github) == RUNS + 1  # that run, downloaded again
    steady = history.of(STEADY_ID)
    assert steady is not None and steady.failed == 0
    assert "hicache::prefill_kl" in (directory / "run-503.json").read_text()
    assert history_dir.load(directory, RUNS).of(STEADY_ID) == steady  # rewritten too


def test_runs_that_are_not_the_base_branchs_own_are_passed_over(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 3)
    world = fake_github.world
    poison = {"results.json": results_io.dumps(results(kl_test("poison", True))).encode()}
    late = "2026-06-01T00:00:00Z"
    hostile = [
        Run(id=901, workflow="ci.yml", event="pull_request", head_repository="fork/engine"),
        Run(id=902, workflow="ci.yml", event="push", head_repository="fork/engine"),
        Run(id=903, workflow="ci.yml", branch="feature"),
        Run(id=904, workflow="ci.yml", head_sha="f" * 40),
    ]
    for run in hostile:
        run.created_at = late
        world.add_run(REPO, run, poison, NAME)
    world.repos[REPO].branches["main"].remove("f" * 40)  # force-pushed away
    history = _fetch(target, tmp_path, events=("push", "schedule"))
    assert [run.run_id for run in history.runs] == [500, 501, 502]
    assert "poison" not in history.tests
    (only, passed) = history.notes
    assert only.startswith("only 3 of the 20 runs asked for: ci.yml runs of a push or schedule")
    assert passed == (
        "passed over: run 904: commit ffffffffffff not on main; run 902: code from fork/engine; "
        "run 901: a pull_request event"
    )
    compared = [e["path"] for e in world.requests if "/compare/" in e["path"]]
    assert compared == [f"/repos/{REPO}/compare/main...{'f' * 40}"]  # not among the listed


def test_a_huge_or_malformed_artifact_is_left_out_and_said_so(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(fake_github, 4)
    artifacts = fake_github.world.repos[REPO].artifacts
    artifacts[1].archive = b"this is not a zip"
    artifacts[2].archive = _zip({"results.json": b"[" * 100_000 + b"]" * 100_000})
    artifacts[3].archive = _zip({"results.json": main_run_bytes(3), "x.bin": os.urandom(4000)})
    monkeypatch.setattr(baseline_fetch, "MAX_ARCHIVE_BYTES", 3000)
    history = _fetch(target, tmp_path)
    assert [run.run_id for run in history.runs] == [500]
    (_, passed) = history.notes
    assert "run 503: artifact kl-bitexact-results is" in passed and "over the 3000-byte" in passed
    assert "run 502: kl-bitexact-results/results.json: schema_version None" in passed
    assert "run 501: artifact kl-bitexact-results: not a zip archive" in passed
    assert not any(
        entry["path"].endswith(f"/{artifacts[3].id}/zip") for entry in fake_github.world.requests
    )
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME))
    assert sorted(path.name for path in directory.iterdir()) == [
        history_fetch.MANIFEST,
        "run-500.json",
        "run-500.zip",
    ]


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def test_the_bytes_and_time_bounds_keep_the_newest_runs(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 5)
    sizes = [len(artifact.archive) for artifact in fake_github.world.repos[REPO].artifacts]
    budget = history_fetch.Bounds(max_total_bytes=sizes[4] + sizes[3])  # the two newest
    history = _fetch(target, tmp_path / "a", budget)
    assert [run.run_id for run in history.runs] == [503, 504]
    assert "run 502: left out: over the history's" in history.notes[-1]
    history = _fetch(target, tmp_path / "b", history_fetch.Bounds(deadline_s=1e-9))
    assert history.runs == ()
    assert "run 504: left out: the history's 1e-09 s were spent" in history.notes[-1]


def test_github_refusing_the_list_is_a_note_not_a_failure(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 2)
    fake_github.add_fault(Fault("GET", "/runs$", 404, {"message": "Not Found"}))
    history = _fetch(target, tmp_path)
    assert history.runs == ()
    assert history.notes == (
        "fetching the history failed: GitHub answered 404 while listing the runs of ci.yml on "
        "main: Not Found",
    )


def test_the_local_github_pages_runs_and_artifacts_keeping_the_filters(
    fake_github: FakeGitHub,
) -> None:
    _seed(fake_github, 5)
    fake_github.world.add_run(REPO, Run(id=990, workflow="ci.yml", branch="feature"), {}, NAME)
    session = requests.Session()
    session.headers["Authorization"] = f"token {TOKEN}"
    url = f"{fake_github.url}/repos/{REPO}/actions/workflows/ci.yml/runs"
    seen: list[int] = []
    page = session.get(url, params={"branch": "main", "event": "push", "per_page": "2"})
    while True:
        seen += [run["id"] for run in page.json()["workflow_runs"]]
        if "next" not in page.links:
            break
        assert "branch=main&event=push&" in page.links["next"]["url"]
        page = session.get(page.links["next"]["url"])
    assert seen == [504, 503, 502, 501, 500]
    world = fake_github.world
    for n in range(3):
        world.repos[REPO].artifacts.append(
            type(world.repos[REPO].artifacts[0])(
                id=7000 + n, run_id=500, name=f"extra-{n}", archive=b""
            )
        )
    listed = session.get(
        f"{fake_github.url}/repos/{REPO}/actions/runs/500/artifacts", params={"per_page": "3"}
    )
    assert [a["name"] for a in listed.json()["artifacts"]] == [NAME, "extra-0", "extra-1"]
    assert listed.json()["total_count"] == 4 and "next" in listed.links
    assert listed.json()["artifacts"][0]["digest"].startswith("sha256:")


def test_the_default_cache_is_the_jobs_temporary_directory_in_actions(tmp_path: Path) -> None:
    job = {"RUNNER_TEMP": str(tmp_path), "XDG_CACHE_HOME": "/elsewhere"}
    assert history_fetch.default_cache(job) == tmp_path / "kl-bitexact-history"
    assert history_fetch.default_cache({"XDG_CACHE_HOME": "/x"}) == Path("/x/kl-bitexact/history")


# --- the cache: a hit is a read; a directory kl-bitexact owns (issues 40 and 36) ----------


def _entry(root: Path) -> Path:
    return history_fetch.cache_dir(root, Wanted(REPO, "ci.yml", "main", NAME))


def _stamps(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_a_warm_fetch_reads_the_cache_and_writes_nothing(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(fake_github, 6)
    cold = _fetch(target, tmp_path)
    before = _stamps(_entry(tmp_path))
    validated: list[str] = []
    loads = results_io.loads

    def counted(raw: bytes, path: Path) -> r.Results:
        validated.append(str(path))
        return loads(raw, path)

    monkeypatch.setattr(results_io, "loads", counted)
    warm = _fetch(target, tmp_path)
    assert _blob_requests(fake_github) == 6 and validated == []  # verified once, when fetched
    assert _stamps(_entry(tmp_path)) == before  # not one file rewritten
    assert warm.runs == cold.runs and warm.notes == cold.notes
    assert [warm.tests[i] for i in warm.tests] == [cold.tests[i] for i in cold.tests]


def test_a_cache_from_before_the_manifest_is_read_once_verified(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 3)
    cold = _fetch(target, tmp_path)
    (_entry(tmp_path) / history_fetch.MANIFEST).unlink()  # an older kl-bitexact's cache
    warm = _fetch(target, tmp_path)
    assert _blob_requests(fake_github) == 3 and warm.of(FLAKY_ID) == cold.of(FLAKY_ID)
    assert (_entry(tmp_path) / history_fetch.MANIFEST).is_file()  # its runs are ours again


@pytest.mark.parametrize("linked", ["root", "entry"])
def test_a_symlinked_cache_directory_is_refused_by_name_and_nothing_written_or_deleted(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, linked: str
) -> None:
    _seed(fake_github, 3)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.json").write_text("a shard's results")
    (elsewhere / "run-1.zip").write_text("someone's archive")
    root = tmp_path / "cache"
    if linked == "root":
        root.symlink_to(elsewhere)
        link = root
    else:
        link = _entry(root)
        link.parent.mkdir(parents=True)
        link.symlink_to(elsewhere)
    history = _fetch(target, root)
    assert history.runs == () and history.notes == (
        f"history cache {link}: a symbolic link, refused (the cache is a directory kl-bitexact "
        "owns: remove the link, or pass another --history-cache)",
    )
    assert sorted(p.name for p in elsewhere.iterdir()) == ["results.json", "run-1.zip"]
    assert _blob_requests(fake_github) == 0


def test_the_prune_deletes_only_the_runs_kl_bitexact_wrote(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    _seed(fake_github, 6)
    _fetch(target, tmp_path, history_fetch.Bounds(runs=5))
    entry = _entry(tmp_path)
    strangers = ["results.json", "notes.zip", "run-7.json", ".download-x.zip"]
    for name in strangers:
        (entry / name).write_text("not ours")
    _fetch(target, tmp_path, history_fetch.Bounds(runs=2))
    kept = sorted(p.name for p in entry.iterdir())
    ours = ["run-504.json", "run-504.zip", "run-505.json", "run-505.zip"]
    assert kept == sorted([*strangers, history_fetch.MANIFEST, *ours])


@pytest.mark.parametrize("kind", ["directory", "symlink", "stranger"])
def test_a_non_file_where_a_runs_file_goes_leaves_the_run_out_and_says_so(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, kind: str
) -> None:
    _seed(fake_github, 3)
    entry = _entry(tmp_path)
    entry.mkdir(parents=True)
    blocker = entry / "run-501.zip"
    if kind == "directory":
        blocker.mkdir()
        (blocker / "inside").write_text("kept")
    elif kind == "symlink":
        (tmp_path / "target.zip").write_text("kept")
        blocker.symlink_to(tmp_path / "target.zip")
    else:
        blocker.write_text("an archive kl-bitexact did not write")
    history = _fetch(target, tmp_path)
    assert [run.run_id for run in history.runs] == [500, 502]
    why = (
        "is not a file (left alone; run left out)"
        if kind != "stranger"
        else "was not written by kl-bitexact and is not GitHub's archive of the run (left alone; "
        "run left out)"
    )
    assert history.notes[-1] == f"passed over: run 501: run-501.zip in the cache {why}"
    assert blocker.is_symlink() if kind == "symlink" else blocker.exists()
    assert (tmp_path / "target.zip").read_text() == "kept" if kind == "symlink" else True
    _fetch(target, tmp_path, history_fetch.Bounds(runs=1))  # run 501 leaves the window
    assert blocker.is_symlink() or blocker.exists()  # still not ours to delete


def test_an_unreadable_cached_archive_is_downloaded_again_never_read_as_no_runs(
    fake_github: FakeGitHub, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(fake_github, 3)
    cold = _fetch(target, tmp_path)
    hashed = history_fetch._sha256

    def refused(path: Path) -> str:  # what a file the fetch may not read answers
        if path.name == "run-501.zip":
            raise PermissionError(13, "Permission denied", str(path))
        return hashed(path)

    monkeypatch.setattr(history_fetch, "_sha256", refused)
    warm = _fetch(target, tmp_path)
    assert _blob_requests(fake_github) == 3 + 1  # that run, downloaded again
    assert warm.runs == cold.runs and warm.of(FLAKY_ID) == cold.of(FLAKY_ID)


def _new_scratch(directory: Path, known: set[Path], timeout: float = 60) -> Path:
    """A scratch file not in `known` once a download wrote a whole chunk to it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in set(directory.glob(".download-*.zip")) - known:
            if path.stat().st_size >= baseline_fetch.CHUNK:
                return path
        time.sleep(0.05)
    raise AssertionError(f"no download wrote a chunk into {directory} in {timeout} s")


def test_a_download_killed_midway_is_removed_by_the_next_fetch_and_a_live_one_left_alone(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    run = Run(id=600, workflow="ci.yml", head_sha=commit(0), created_at=when(0))
    # Random bytes do not deflate: an archive of several chunks, which stops after two.
    files = {"results.json": main_run_bytes(0), "padding.bin": os.urandom(4 * baseline_fetch.CHUNK)}
    artifact = fake_github.world.add_run(REPO, run, files, NAME)
    release = fake_github.stall(f"/_fake/blobs/{artifact.id}$", 2 * baseline_fetch.CHUNK, times=2)
    env = {**os.environ, **FAST_ENV, "GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_github.url}
    argv = ["history", "--repo", REPO, "--workflow", "ci.yml", "--history-cache", str(tmp_path)]
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME, ("push",)))
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with process_groups.run_cli(argv, env=env, **pipes) as killed:
        left = _new_scratch(directory, set())
        os.kill(killed.pid, signal.SIGKILL)  # no finally runs: the scratch file stays
        assert killed.wait(timeout=10) == -signal.SIGKILL and left.exists()
    with process_groups.run_cli(argv, env=env, **pipes) as live:
        writing = _new_scratch(directory, {left})
        assert left.exists()  # the live one's own fetch left it: changed too recently
        # Both older than any age bound: the lock, not the age, tells the live one apart.
        old = time.time() - history_fetch.SCRATCH_GRACE_S - 60
        for path in (left, writing):
            os.utime(path, (old, old))
        fresh = directory / ".download-unlocked.zip"  # just created, not locked yet
        fresh.write_bytes(b"")
        said: list[str] = []
        history = _fetch(target, tmp_path, said=said)  # the stall is spent: this one downloads
        assert [r.run_id for r in history.runs] == [600]
        assert said[0] == f"removed 1 unfinished download(s) left in {directory}"
        assert not left.exists() and writing.exists() and fresh.exists()
        release.set()
        _, err = live.communicate(timeout=60)
        assert live.returncode == 0, err
    assert sorted(path.name for path in directory.glob(".download-*")) == [fresh.name]
    archive = directory / "run-600.zip"
    assert archive.read_bytes() == artifact.archive  # the live download, whole, in place


def _seed_padded(fake_github: FakeGitHub, run_ids: range) -> list[int]:
    """Runs whose archives are several chunks (random bytes do not deflate); their blobs'
    artifact ids, in the order of `run_ids`."""
    blobs = []
    for i, run_id in enumerate(run_ids):
        run = Run(id=run_id, workflow="ci.yml", head_sha=commit(i), created_at=when(i))
        files = {"results.json": main_run_bytes(i), "pad.bin": os.urandom(4 * baseline_fetch.CHUNK)}
        blobs.append(fake_github.world.add_run(REPO, run, files, NAME).id)
    return blobs


def test_the_historys_deadline_holds_inside_a_download_that_trickles(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    blobs = _seed_padded(fake_github, range(700, 703))
    # A byte every 5 ms from one blob: no read ever waits long, and the archive alone takes
    # minutes. The history's deadline, checked only between downloads, was then no bound.
    fake_github.trickle(f"/_fake/blobs/{blobs[1]}$", step=1, interval=0.005)
    env = {**os.environ, **FAST_ENV, "GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake_github.url}
    timeout_s = 3
    argv = ["history", "--repo", REPO, "--workflow", "ci.yml", "--history-cache", str(tmp_path)]
    argv += ["--history-runs", "3", "--history-timeout", str(timeout_s), "--all"]
    started = time.monotonic()
    with process_groups.run_cli(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as cli:
        out, err = cli.communicate(timeout=timeout_s + 30)  # before: about 25 minutes
        took = time.monotonic() - started
        assert cli.returncode == 0, err
        with pytest.raises(ProcessLookupError):  # nothing of its group is left
            os.killpg(cli.pid, 0)
    assert took < timeout_s + 20
    said, shown = err.decode(), out.decode()
    assert re.search(
        r"history: run 701: download stopped at \d+\.\d MB of 0\.3 MB: the history's 3 s were "
        r"spent; it and the older runs are left out",
        said,
    ), said
    assert "run 702 (1 of 3, " in said  # downloaded before the deadline, and kept
    assert "run 701: left out: the history's 3 s were spent during its download (" in shown
    assert "run 700: left out: the history's 3 s were spent" in shown
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME))
    assert list(directory.glob(".download-*")) == []
    assert sorted(path.name for path in directory.glob("run-*")) == ["run-702.json", "run-702.zip"]
    # The trickle is spent: the rest come, 702 from the cache.
    history = _fetch(target, tmp_path, history_fetch.Bounds(runs=3))
    assert [run.run_id for run in history.runs] == [700, 701, 702]
    assert history.notes == ()
    assert _blob_requests(fake_github) == 2 + 2  # 700 was never asked for before


@pytest.mark.timeout(60)  # before: a sleep of 600 s
def test_a_retry_never_waits_past_the_historys_deadline(
    fake_github: FakeGitHub, target: Target, tmp_path: Path
) -> None:
    blobs = _seed_padded(fake_github, range(700, 703))
    # Blob storage busy for ten minutes: urllib3 honours Retry-After, so each retry slept it.
    busy = {"Retry-After": "600"}
    fake_github.add_fault(Fault("GET", f"/_fake/blobs/{blobs[1]}$", 503, {}, busy, times=10))
    said: list[str] = []
    started = time.monotonic()
    history = _fetch(target, tmp_path, history_fetch.Bounds(runs=3, deadline_s=2), said=said)
    assert time.monotonic() - started < 2 + 10
    assert [run.run_id for run in history.runs] == [702]
    assert said[-2] == (
        "run 701: download stopped at 0.0 MB of 0.3 MB: the history's 2 s were spent; it and "
        "the older runs are left out"
    )
    note = history.notes[-1]
    assert "run 701: left out: the history's 2 s were spent during its download (0.0 MB" in note
    assert "run 700: left out: the history's 2 s were spent" in note
    directory = history_fetch.cache_dir(tmp_path, Wanted(REPO, "ci.yml", "main", NAME))
    assert list(directory.glob(".download-*")) == []


@pytest.mark.timeout(60)  # before: six attempts of 60 s each
def test_a_download_whose_answer_never_comes_stops_at_its_deadline(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects, never answers
        port = silent.getsockname()[1]
        target = tmp_path / "archive.zip"
        started = time.monotonic()
        with pytest.raises(baseline_fetch.DeadlineSpent, match="ran past the deadline"):
            baseline_fetch.download(f"http://127.0.0.1:{port}/blob", target, NAME, started + 1)
        assert time.monotonic() - started < 1 + 5

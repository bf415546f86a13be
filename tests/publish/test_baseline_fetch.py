"""Fetching the base branch's results artifact: choice of run, shards, and distrust."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from gh_constants import FAST, REPO, TOKEN

from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.errors import ConfigError
from kl_bitexact.publish import baseline_fetch
from kl_bitexact.publish.client import Target, connect
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.fake_state import Fault, Run

NAME = "kl-bitexact-results"


def _results(*ids: str) -> bytes:
    tests = tuple(r.TestResult(id=i, check="match", status=r.Status.PASSED) for i in ids)
    suite = r.SuiteResult("s", r.ServerInfo("reference"), tests)
    return results_io.dumps(r.Results(suites=(suite,))).encode()


def _fetch(
    fake_github: FakeGitHub, target: Target, events: tuple[str, ...] = ("push",)
) -> Baseline:
    session = connect(target, TOKEN, FAST)
    return baseline_fetch.fetch(session, REPO, "ci.yml", "main", NAME, events=events)


def test_shards_in_one_artifact_are_merged(fake_github: FakeGitHub, target: Target) -> None:
    files = {"shard-0/results.json": _results("a"), "shard-1/results.json": _results("b")}
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), files, NAME)
    fetched = _fetch(fake_github, target)
    assert fetched.results is not None, fetched.unavailable
    assert [t.id for _, t in fetched.results.all_tests()] == ["a", "b"]


def test_failed_runs_other_branches_and_other_artifacts_are_passed_over(
    fake_github: FakeGitHub, target: Target
) -> None:
    world = fake_github.world
    world.add_run(
        REPO,
        Run(id=1, workflow="ci.yml", created_at="2026-01-01T00:00:00Z"),
        {"results.json": _results("good")},
        NAME,
    )
    world.add_run(
        REPO,
        Run(id=2, workflow="ci.yml", conclusion="failure"),
        {"results.json": _results("failed-run")},
        NAME,
    )
    world.add_run(
        REPO,
        Run(id=3, workflow="ci.yml", branch="feature"),
        {"results.json": _results("other-branch")},
        NAME,
    )
    world.add_run(REPO, Run(id=4, workflow="ci.yml"), {"log.txt": b"x"}, "logs")
    world.add_run(
        REPO, Run(id=5, workflow="other.yml"), {"results.json": _results("other-workflow")}, NAME
    )
    fetched = _fetch(fake_github, target)
    assert fetched.results is not None, fetched.unavailable
    assert [t.id for _, t in fetched.results.all_tests()] == ["good"]


@pytest.mark.parametrize(
    ("run", "why"),
    [
        # Issue 14, case 2: a fork PR's branch named `main`, under `pull_request`.
        ({"event": "pull_request", "head_repository": "fork/engine"}, "a pull_request event"),
        ({"event": "push", "head_repository": "fork/engine"}, "code from fork/engine"),
        ({"event": "workflow_dispatch"}, "a workflow_dispatch event"),
    ],
)
def test_runs_that_are_not_the_base_branchs_own_are_passed_over_with_the_reason(
    fake_github: FakeGitHub, target: Target, run: dict, why: str
) -> None:
    files = {"results.json": _results("poisoned")}
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml", **run), files, NAME)
    # Two trusted events: GitHub cannot filter by both, so each run is judged here.
    fetched = _fetch(fake_github, target, events=("push", "schedule"))
    assert fetched.results is None
    assert fetched.unavailable == (
        f"no successful ci.yml run of a push or schedule on main in {REPO} has a {NAME} "
        f"artifact (passed over: run 1: {why})"
    )
    if run["event"] != "push":  # one trusted event: GitHub filters, so no run fills the window
        assert "passed over" not in _fetch(fake_github, target).unavailable


def test_a_commit_off_the_branchs_history_is_passed_over(
    fake_github: FakeGitHub, target: Target
) -> None:
    world = fake_github.world
    world.add_run(
        REPO, Run(id=1, workflow="ci.yml", head_sha="a" * 40), {"r.json": _results("a")}, NAME
    )
    world.add_run(
        REPO,
        Run(id=2, workflow="ci.yml", head_sha="f" * 40, created_at="2030-01-01T00:00:00Z"),
        {"r.json": _results("gone")},
        NAME,
    )
    world.repos[REPO].branches["main"].remove("f" * 40)  # force-pushed away
    fetched = _fetch(fake_github, target)
    assert fetched.results is not None, fetched.unavailable
    assert [t.id for _, t in fetched.results.all_tests()] == ["a"]
    compared = [e["path"] for e in world.requests if "/compare/" in e["path"]]
    assert compared == [
        f"/repos/{REPO}/compare/main...{'f' * 40}",
        f"/repos/{REPO}/compare/main...{'a' * 40}",
    ]


def test_only_the_newest_runs_are_searched_and_the_reason_counts_the_rest(
    fake_github: FakeGitHub, target: Target
) -> None:
    for number in range(1, 13):
        run = Run(id=number, workflow="ci.yml", event="push", head_repository="fork/engine")
        fake_github.world.add_run(REPO, run, {"r.json": _results("x")}, NAME)
    reason = _fetch(fake_github, target).unavailable
    assert reason.endswith(f"; {baseline_fetch.MAX_RUNS - baseline_fetch.MAX_REASONS} more)")


def test_an_archive_that_is_not_a_zip_is_a_reason_not_a_crash(
    fake_github: FakeGitHub, target: Target
) -> None:
    artifact = fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), {}, NAME)
    artifact.archive = b"this is not a zip"
    assert _fetch(fake_github, target).unavailable == (
        f"fetching the baseline failed: artifact {NAME}: not a zip archive"
    )


def test_an_oversized_artifact_is_not_downloaded(
    fake_github: FakeGitHub, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), {"r.json": _results("a")}, NAME)
    monkeypatch.setattr(baseline_fetch, "MAX_ARCHIVE_BYTES", 100)
    assert "over the 100-byte limit" in _fetch(fake_github, target).unavailable
    assert not any("/_fake/blobs" in e["path"] for e in fake_github.world.requests)


def test_member_names_cannot_escape_the_scratch_directory(
    fake_github: FakeGitHub, target: Target
) -> None:
    files = {"../../../../tmp/kl-bitexact-escape.json": _results("a")}
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), files, NAME)
    fetched = _fetch(fake_github, target)
    assert fetched.results is not None, fetched.unavailable
    assert not Path("/tmp/kl-bitexact-escape.json").exists()


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("octo/engine/.github/workflows/bitexact.yml@refs/pull/7/merge", "bitexact.yml"),
        ("octo/engine/.github/workflows/ci.yaml@refs/heads/main", "ci.yaml"),
        (None, None),
        ("garbage", None),
    ],
)
def test_workflow_file_from_github_workflow_ref(ref: str | None, name: str | None) -> None:
    assert baseline_fetch.workflow_file(ref) == name


def test_a_blob_download_that_fails_is_a_reason(fake_github: FakeGitHub, target: Target) -> None:
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), {"r.json": _results("a")}, NAME)
    # Expired between listing and download; 5xx would be retried, a 404 is final.
    fake_github.add_fault(Fault("GET", "^/_fake/blobs/", 404, {"message": "BlobNotFound"}))
    reason = _fetch(fake_github, target).unavailable
    assert reason == (
        f"fetching the baseline failed: the download answered 404 while downloading artifact {NAME}"
    )


def test_a_blob_502_is_retried(fake_github: FakeGitHub, target: Target) -> None:
    fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), {"r.json": _results("a")}, NAME)
    fake_github.add_fault(Fault("GET", "^/_fake/blobs/", 502, {"message": "Bad Gateway"}))
    fetched = _fetch(fake_github, target)
    assert fetched.results is not None, fetched.unavailable
    assert fake_github.world.faults == []  # the 502 was served, then the retry succeeded


# --- the archive is hostile in every dimension: issue 14, case 2 ----------------------------


def _stored_archive(fake_github: FakeGitHub, archive: bytes) -> None:
    artifact = fake_github.world.add_run(REPO, Run(id=1, workflow="ci.yml"), {}, NAME)
    artifact.archive = archive


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def test_members_each_under_the_bound_but_too_much_in_total_are_refused_unextracted(
    fake_github: FakeGitHub, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bomb: a 735 KB zip of members each under the per-file limit extracted
    # to 756 MB. Here with the bound lowered so the test stays small.
    monkeypatch.setattr(baseline_fetch, "MAX_EXTRACTED_BYTES", 5_000)
    members = {f"shard-{n}/results.json": b" " * 2_000 + _results(f"t{n}") for n in range(4)}
    _stored_archive(fake_github, _zip(members))
    decoded: list[int] = []
    monkeypatch.setattr(baseline_fetch, "_read_member", lambda *a: decoded.append(1))
    reason = _fetch(fake_github, target).unavailable
    assert "over the 5000-byte limit for all results files of an artifact" in reason, reason
    assert decoded == []  # refused from the declared sizes, before decompressing anything


def test_an_artifact_of_many_files_is_refused(fake_github: FakeGitHub, target: Target) -> None:
    members = {f"f{n}.json": b"{}" for n in range(baseline_fetch.MAX_MEMBERS + 1)}
    _stored_archive(fake_github, _zip(members, zipfile.ZIP_STORED))
    reason = _fetch(fake_github, target).unavailable
    assert f"{baseline_fetch.MAX_MEMBERS + 1} files" in reason, reason


def test_a_member_holding_more_than_it_declares_is_not_read_past_its_word(tmp_path: Path) -> None:
    # The central directory says 10 bytes; zipfile stops there and the CRC then fails.
    data = _zip({"r.json": _results("a")}, zipfile.ZIP_STORED)
    directory = data.index(b"PK\x01\x02")
    size_field = directory + 24  # uncompressed size in the central directory entry
    archive = tmp_path / "a.zip"
    archive.write_bytes(data[:size_field] + (10).to_bytes(4, "little") + data[size_field + 4 :])
    with pytest.raises(ConfigError, match=r"r\.json cannot be read \(BadZipFile"):
        baseline_fetch.load_archive(archive, NAME, max_total=100)


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "schema_version None is not supported"),
        (b'{"schema_version": 1' + b"0" * 5_000 + b"}", "schema_version"),
        (
            b'{"schema_version": 1, "suites": [' + b'"\\ud800", ' * 3 + b"1" + b"0" * 5000 + b"]}",
            "digits",
        ),
    ],
    ids=["deeply-nested", "5000-digit-integer", "5000-digit-integer-beside-a-surrogate"],
)
def test_a_hostile_results_document_is_a_reason_not_a_crash(
    fake_github: FakeGitHub, target: Target, document: bytes, why: str
) -> None:
    _stored_archive(fake_github, _zip({"results.json": document}))
    fetched = _fetch(fake_github, target)
    assert fetched.results is None, fetched
    prefix = f"fetching the baseline failed: {NAME}/results.json: "
    assert fetched.unavailable.startswith(prefix) and why in fetched.unavailable


def _corrupt(data: bytes) -> bytes:
    """Flip bytes in the middle of the first member's compressed data."""
    start = 30 + len("results.json")
    middle = start + 20
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :]


@pytest.mark.parametrize(
    "archive",
    [
        _corrupt(_zip({"results.json": _results(*(f"t{n}" for n in range(50)))})),
        # Compression method 99 (AES, what encrypting zip tools write): not readable here.
        _zip({"results.json": _results("a")}, zipfile.ZIP_STORED)
        .replace(b"PK\x03\x04\x14\x00\x00\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x00\x63\x00", 1)
        .replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00",
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00\x63\x00",
            1,
        ),
        # The encrypted flag set on the member.
        _zip({"results.json": _results("a")}, zipfile.ZIP_STORED).replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x01\x00", 1
        ),
    ],
    ids=["corrupt-deflate", "unknown-compression", "encrypted"],
)
def test_an_unreadable_member_is_a_reason_not_a_crash(
    fake_github: FakeGitHub, target: Target, archive: bytes
) -> None:
    _stored_archive(fake_github, archive)
    fetched = _fetch(fake_github, target)
    assert fetched.results is None
    assert fetched.unavailable.startswith(f"fetching the baseline failed: artifact {NAME}:")

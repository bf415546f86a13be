"""Fetch the base branch's results: the newest successful run of a workflow, its artifact.

The artifact was written by a run that executed code (the base branch's, but still), so
the download is bounded, the archive's members are bounded before they are read, and each
results file goes through `results_io.load` (size limit, schema) like any other.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from itertools import islice
from pathlib import Path, PurePosixPath

from github import Github
from github.Artifact import Artifact

from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish.client import blob_session, translated
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results

DEFAULT_ARTIFACT = "kl-bitexact-results"
# Runs to look through for one that still has the artifact (they expire).
MAX_RUNS = 10
MAX_ARCHIVE_BYTES = results_io.MAX_RESULTS_BYTES
CHUNK = 64 * 1024


def workflow_file(workflow_ref: str | None) -> str | None:
    """`owner/repo/.github/workflows/ci.yml@refs/...` (GITHUB_WORKFLOW_REF) -> `ci.yml`."""
    if not workflow_ref or "/.github/workflows/" not in workflow_ref:
        return None
    return workflow_ref.split("/.github/workflows/", 1)[1].split("@", 1)[0] or None


def fetch(
    client: Github, repository: str, workflow: str, branch: str, artifact_name: str, token: str
) -> Baseline:
    """The newest successful base run's results, or why there are none.

    A base that cannot be had is a reason shown in the comment, not a failure: without it
    the gate simply cannot excuse red tests that were already red on the base.
    """
    try:
        with translated(f"looking for the baseline run of {workflow} on {branch}", token):
            artifact = _newest_artifact(client, repository, workflow, branch, artifact_name)
            if artifact is None:
                why = f"no successful {workflow} run on {branch} has a {artifact_name} artifact"
                return Baseline(None, why)
            location = _download_location(client, artifact)
        return Baseline.of(_fetch_archive(location, artifact, token))
    except (GitHubError, ConfigError) as error:
        return Baseline(None, f"fetching the baseline failed: {error.message}")


def _newest_artifact(
    client: Github, repository: str, workflow: str, branch: str, name: str
) -> Artifact | None:
    runs = (
        client.get_repo(repository).get_workflow(workflow).get_runs(branch=branch, status="success")
    )
    for run in islice(runs, MAX_RUNS):  # newest first
        for artifact in run.get_artifacts():
            if artifact.name == name and not artifact.expired:
                return artifact
    return None


def _download_location(client: Github, artifact: Artifact) -> str:
    """GitHub answers the archive URL with a redirect to short-lived blob storage."""
    if artifact.size_in_bytes > MAX_ARCHIVE_BYTES:
        raise GitHubError(
            f"artifact {artifact.name} is {artifact.size_in_bytes} bytes, over the "
            f"{MAX_ARCHIVE_BYTES}-byte limit for a results artifact"
        )
    headers, _ = client.requester.requestJsonAndCheck("GET", artifact.archive_download_url)
    location = headers.get("location")
    if not location:
        raise GitHubError(f"artifact {artifact.name}: GitHub gave no download location")
    return str(location)


def _fetch_archive(location: str, artifact: Artifact, token: str) -> results.Results:
    with tempfile.TemporaryDirectory(prefix="kl-bitexact-baseline-") as scratch:
        archive = Path(scratch) / "artifact.zip"
        with translated(f"downloading artifact {artifact.name}", token):
            _download(location, archive, artifact.name)
        return _load_archive(archive, Path(scratch) / "files", artifact.name)


def _download(location: str, target: Path, name: str) -> None:
    """Stream the archive to disk, stopping at the size bound; no token is sent."""
    with blob_session().get(location, stream=True, timeout=60) as answer:
        answer.raise_for_status()
        with target.open("wb") as out:
            for chunk in _bounded(answer.iter_content(CHUNK), name):
                out.write(chunk)


def _bounded(chunks: Iterator[bytes], name: str) -> Iterator[bytes]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_ARCHIVE_BYTES:
            raise GitHubError(f"artifact {name} download exceeds {MAX_ARCHIVE_BYTES} bytes")
        yield chunk


def _load_archive(archive: Path, directory: Path, name: str) -> results.Results:
    """Every *.json member is a results file (one per shard); merged into one."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            paths = [_extract(bundle, info, directory) for info in _json_members(bundle, name)]
    except zipfile.BadZipFile:
        raise ConfigError(f"artifact {name}: not a zip archive") from None
    loaded = [(f"{name}:{path.name}", results_io.load(path)) for path in paths]
    return results_io.merge(loaded)


def _json_members(bundle: zipfile.ZipFile, name: str) -> list[zipfile.ZipInfo]:
    members = [info for info in bundle.infolist() if info.filename.endswith(".json")]
    if not members:
        raise ConfigError(f"artifact {name}: no results .json file inside")
    for info in members:
        if info.file_size > results_io.MAX_RESULTS_BYTES:
            raise ConfigError(f"artifact {name}: {info.filename} is over the size limit")
    return members


def _extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, directory: Path) -> Path:
    # Flatten: a member name never chooses where it lands (no ../ escapes).
    safe = "__".join(PurePosixPath(info.filename).parts[-2:]).replace("..", "_")
    target = directory / safe
    target.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(info) as source, target.open("wb") as out:
        out.write(source.read(results_io.MAX_RESULTS_BYTES + 1))
    return target

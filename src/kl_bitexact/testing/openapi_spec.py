"""GitHub's REST API description, fetched once from npm and cached on disk.

The description ships in the npm package `@octokit/openapi` (385 MB installed), so only its
tarball is fetched (`npm pack`, ~29 MB) and the one file we need is extracted from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = "@octokit/openapi"
# Pinned so the fake cannot drift silently; bump deliberately.
VERSION = "23.0.2"
MEMBER = "package/generated/api.github.com.json"


class SpecUnavailableError(RuntimeError):
    """The description is not cached and could not be fetched."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kl-bitexact" / "openapi" / VERSION


def spec_path() -> Path:
    """Path of api.github.com.json: $KL_BITEXACT_OPENAPI_SPEC, the cache, or a fresh fetch."""
    override = os.environ.get("KL_BITEXACT_OPENAPI_SPEC")
    if override:
        return Path(override)
    target = cache_dir() / "api.github.com.json"
    if not target.exists():
        _fetch(target)
    return target


@cache
def load_spec() -> dict[str, Any]:
    with spec_path().open(encoding="utf-8") as handle:
        spec: dict[str, Any] = json.load(handle)
    return spec


def _fetch(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SpecUnavailableError(
            f"npm is needed once to fetch {PACKAGE}@{VERSION}; install Node.js, "
            "or point KL_BITEXACT_OPENAPI_SPEC at api.github.com.json"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [npm, "pack", "--silent", f"{PACKAGE}@{VERSION}"],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SpecUnavailableError(f"npm pack {PACKAGE}@{VERSION} failed: {done.stderr}")
        tarball = Path(scratch) / done.stdout.strip().splitlines()[-1]
        _extract_member(tarball, target)


def _extract_member(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball, "r:gz") as archive:
        source = archive.extractfile(MEMBER)
        if source is None:
            raise SpecUnavailableError(f"{tarball.name} has no {MEMBER}")
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        with source, partial.open("wb") as out:
            shutil.copyfileobj(source, out)
    partial.replace(target)


if __name__ == "__main__":
    # `.ci/run` calls this first so a clean machine fetches the description once, visibly.
    print(spec_path())

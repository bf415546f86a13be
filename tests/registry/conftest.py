from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "registry"


def materialize(overlay: str | None, target: Path) -> Path:
    """A copy of the base fixture repository with `overlay`'s files copied over it."""
    shutil.copytree(FIXTURES / "base", target)
    if overlay is not None:
        shutil.copytree(FIXTURES / overlay, target, dirs_exist_ok=True)
    return target


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[[str | None], Path]:
    def make(overlay: str | None = None) -> Path:
        return materialize(overlay, tmp_path / "repo")

    return make


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def snapshot() -> Callable[[Path], dict[str, bytes]]:
    """Every file of a repository, by relative path, for before/after comparisons."""
    return _snapshot


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's scan cache is its own (subprocesses inherit the variable)."""
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))

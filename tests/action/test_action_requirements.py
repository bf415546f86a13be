"""action-setup/requirements.txt pins every runtime dependency within pyproject.toml's bounds."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def pinned() -> list[Requirement]:
    lines = (ROOT / "action-setup" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def declared() -> list[Requirement]:
    """The runtime dependencies of the installed kl-bitexact (extras left out)."""
    requirements = [Requirement(text) for text in metadata.requires("kl-bitexact") or ()]
    return [r for r in requirements if r.marker is None or "extra" not in str(r.marker)]


def test_every_pin_is_exact():
    for requirement in pinned():
        [specifier] = requirement.specifier
        assert specifier.operator == "==", requirement


def test_every_dependency_is_pinned_within_its_bounds_on_each_python():
    for python in ("3.10", "3.11", "3.13"):
        # packaging types its environment as a TypedDict; every value is a string.
        environment = {**cast(dict[str, str], default_environment()), "python_version": python}
        versions = {
            canonicalize_name(r.name): next(iter(r.specifier)).version
            for r in pinned()
            if r.marker is None or r.marker.evaluate(environment)
        }
        for requirement in declared():
            name = canonicalize_name(requirement.name)
            assert name in versions, f"{name} missing from action-setup/requirements.txt"
            assert requirement.specifier.contains(versions[name]), (name, versions[name])

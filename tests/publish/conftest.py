"""Fixtures for everything that talks to GitHub: a spec-checked local GitHub per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gh_constants import REPO, TOKEN

from kl_bitexact.publish.client import Target
from kl_bitexact.testing.fake_github import FakeGitHub
from kl_bitexact.testing.openapi_check import SpecChecker


@pytest.fixture(scope="session")
def spec_checker() -> SpecChecker:
    """GitHub's OpenAPI description (fetched from npm once, then cached on disk)."""
    return SpecChecker()


@pytest.fixture
def fake_github(spec_checker: SpecChecker) -> Iterator[FakeGitHub]:
    """A local GitHub with one repository; fails the test if anything broke the spec."""
    server = FakeGitHub(TOKEN, checker=spec_checker).start()
    server.world.seed({"repos": {REPO: {}}})
    yield server
    server.stop()
    assert server.world.violations == [], server.world.violations


@pytest.fixture
def target(fake_github: FakeGitHub) -> Target:
    return Target(api_url=fake_github.url, repository=REPO, pr_number=7)

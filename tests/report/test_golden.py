"""Rendered comments against the reviewed golden files (refresh: tests/golden/refresh.py)."""

from __future__ import annotations

import pytest
from gfm_check import assert_renders_safely
from golden_scenarios import BLOCKER, LINKS, Scenario, all_scenarios, golden_path


@pytest.mark.parametrize("scenario", all_scenarios(), ids=lambda s: s.name)
def test_comment_matches_golden_file(scenario: Scenario):
    path = golden_path(scenario)
    assert path.exists(), f"no golden file; run `python tests/golden/refresh.py` and review {path}"
    assert scenario.render() == path.read_text(encoding="utf-8"), (
        f"{path.name} changed: run `python tests/golden/refresh.py`, review the diff, commit"
    )


@pytest.mark.parametrize("scenario", all_scenarios(), ids=lambda s: s.name)
def test_github_markdown_engine_sees_only_our_structure(scenario: Scenario):
    links = [link for link in (LINKS.run, LINKS.artifact) if link]
    # A blocker is a link through redirect.github.com (no backlink on it), never a bare ref.
    links.append("https://redirect.github.com/sgl-project/sglang/issues/29792")
    assert_renders_safely(scenario.render(), links, refs=[BLOCKER])

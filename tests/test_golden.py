"""Rendered comments against the reviewed golden files (refresh: tests/golden/refresh.py)."""

from __future__ import annotations

import pytest

from golden_scenarios import Scenario, all_scenarios, golden_path


@pytest.mark.parametrize("scenario", all_scenarios(), ids=lambda s: s.name)
def test_comment_matches_golden_file(scenario: Scenario):
    path = golden_path(scenario)
    assert path.exists(), f"no golden file; run `python tests/golden/refresh.py` and review {path}"
    assert scenario.render() == path.read_text(encoding="utf-8"), (
        f"{path.name} changed: run `python tests/golden/refresh.py`, review the diff, commit"
    )

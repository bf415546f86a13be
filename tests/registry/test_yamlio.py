"""Workflows are read with PyYAML's C parser (issue 25): the same data and positions as
ruamel.yaml's round-trip parser gave, the same bounds, and ruamel.yaml is loaded only for
`--fix`'s edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import yamlio

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "registry"
WORKFLOWS = sorted(FIXTURES.glob("*/.github/**/*.y*ml"))


def _positions(fast: Any, slow: Any, where: str = "") -> list[tuple[str, int | None, int | None]]:
    """Every (path, fast line, round-trip line) of keys and items that differ."""
    found = []
    if isinstance(slow, dict):
        for key in slow:
            here = f"{where}/{key}"
            if yamlio.key_line(fast, key) != yamlio.key_line(slow, key):
                found.append((here, yamlio.key_line(fast, key), yamlio.key_line(slow, key)))
            found += _positions(fast[key], slow[key], here)
    elif isinstance(slow, list):
        for index, item in enumerate(slow):
            here = f"{where}[{index}]"
            if yamlio.item_line(fast, index) != yamlio.item_line(slow, index):
                found.append((here, yamlio.item_line(fast, index), yamlio.item_line(slow, index)))
            found += _positions(fast[index], item, here)
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_c_reader_gives_the_round_trip_readers_data_and_lines(path):
    text = path.read_text()
    fast, slow = yamlio.load(text, path.name), yamlio.load_round_trip(text, path.name)
    assert yamlio.plain(fast) == yamlio.plain(slow)
    assert _positions(fast, slow) == []


def test_yaml_1_2_scalars_anchors_merges_and_block_scripts():
    document = yamlio.load(
        "on: {push: null}\nbase: &b {x: yes, y: 0o17, z: 1_000, t: 2024-01-01}\n"
        "job:\n  <<: *b\n  x: 2\n  run: |\n    cd test\n",
        "w.yml",
    )
    assert set(document) == {"on", "base", "job"}  # `on` stays a key, as GitHub reads it
    assert document["base"] == {"x": "yes", "y": 15, "z": "1_000", "t": "2024-01-01"}
    assert document["job"]["x"] == 2 and document["job"]["t"] == "2024-01-01"
    assert yamlio.script_line(document["job"], "run") == 7


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: 1\na: 2\n", "w.yml:2: not valid YAML (found duplicate key 'a')"),
        ("a: [" * 70 + "]" * 70 + "\n", "nested more than 64 levels deep"),
        ("a: &a [*a]\n", "inside the node it names"),
        ("a: " + "9" * 200 + "\n", "a number of 200 digits"),
        ("a: !!python/object:os.system x\n", "which plain data does not hold"),
        ("a: [1,\n", "w.yml:2: not valid YAML"),
    ],
)
def test_the_bounds_and_errors_hold(text, why):
    with pytest.raises(ConfigError) as raised:
        yamlio.load(text, "w.yml")
    assert why in raised.value.message


def test_lint_ci_without_fix_never_loads_the_round_trip_parser():
    # Before: ruamel.yaml read every workflow twice (3 s of a 4 s cold run on sglang).
    code = (
        "import sys\nfrom kl_bitexact.cli import main\n"
        f"main(['lint-ci', '--root', {str(FIXTURES / 'base')!r}])\n"
        "print('ruamel.yaml' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr

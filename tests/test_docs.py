"""The README and docs/ hold together: links land, the command table lists every command,
and the examples given are ones the code accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kl_bitexact import cli
from kl_bitexact.testing.fake_state import World

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
# [text](target) outside code; targets with a scheme (https:, mailto:) are not ours to check.
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation but `-` and `_` dropped,
    spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {github_anchor(heading) for heading in headings}


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_and_anchor_exists(doc):
    broken = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("Flake meter (`run --repeat`)") == "flake-meter-run---repeat"
    assert github_anchor("`kl-bitexact shard`") == "kl-bitexact-shard"


def test_cli_doc_lists_every_command():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z-]+)[ `]", table, flags=re.MULTILINE))
    assert documented == {command.name for command in cli.COMMANDS}


def test_fake_github_doc_seed_example_is_accepted():
    text = (ROOT / "docs" / "fake-github.md").read_text(encoding="utf-8")
    example = re.search(r"```json\n(.*?)```", text, flags=re.DOTALL)
    assert example, "docs/fake-github.md has no ```json seed example"
    seed = json.loads(example[1])
    world = World("T")
    world.seed(seed)
    repo = world.repos["acme/engine"]
    assert repo.pulls[7].head_sha == "1" * 40 and repo.pulls[3].merged
    assert repo.issues[5].state_reason == "not_planned"
    assert [comment.issue for comment in repo.comments] == [7]
    assert [run.workflow for run in repo.runs] == ["bitexact.yml"]
    assert [artifact.name for artifact in repo.artifacts] == ["kl-bitexact-results"]


def test_every_lint_finding_code_is_documented():
    from kl_bitexact.registry.findings import Code

    text = (ROOT / "docs" / "lint-ci.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \| (?:error|warning) \|", text, re.MULTILINE))
    assert documented == {code.value for code in Code}


def test_readme_shows_a_captured_run_and_the_comment_picture():
    # Both written by scripts/readme_media.py, the one way to refresh them.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    captured = readme.split("<!-- run-output:begin", 1)[1].split("<!-- run-output:end -->", 1)[0]
    assert "\n8 ok\n" in captured and "\n1 failing (no base result), 7 ok\n" in captured
    assert "](docs/images/pr-comment.png)" in readme
    assert (ROOT / "docs" / "images" / "pr-comment.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""Render Markdown with cmark-gfm (GitHub's own engine) and check what a reader would get.

Raw-text checks can miss what the engine makes of a string (an autolinked URL, an emphasis,
a table cell split by a pipe); this looks at the HTML GitHub would start from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

ALLOWED_TAGS = {
    "h2", "h3", "h4", "p", "strong", "table", "thead", "tbody", "tr", "th", "td",
    "code", "pre", "details", "summary", "sub", "ul", "li", "a", "blockquote", "br",
}  # fmt: skip
VOID = {"br"}
MENTION = re.compile(r"@[A-Za-z0-9]")


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.open: list[str] = []
        self.links: list[str | None] = []
        self.comments: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag == "a":
            self.links.append(dict(attrs).get("href"))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        assert tag in VOID, f"<{tag} />"
        self.tags[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_renders_safely(markdown: str, links: Iterable[str], refs: Iterable[str] = ()) -> None:
    """GitHub's engine makes of `markdown` only our elements, links and references."""
    html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    reader = _Reader()
    reader.feed(html)
    reader.close()
    assert set(reader.tags) <= ALLOWED_TAGS, set(reader.tags) - ALLOWED_TAGS
    assert not reader.open, f"unclosed {reader.open}"
    assert set(reader.links) <= set(links), reader.links
    assert len(reader.comments) <= 1
    text = "".join(reader.text)
    assert not MENTION.search(text)
    for ref in refs:
        text = text.replace(ref, "")
    assert not re.search(r"#\d", text)

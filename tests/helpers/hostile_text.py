"""Hostile strings for escaping tests: fragments that break Markdown, ping people, link, or
inject workflow commands, and the patterns that must not survive rendering. Shared by the
escaper's own tests and the report's."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import strategies as st

FRAGMENTS = (
    "|",
    "`",
    "```",
    "\n",
    "\r",
    "\r\n",
    "\u2028",
    "@octocat",
    "@org/team",
    "#123",
    "GH-7",
    "o/r#9",
    "<script>alert(1)</script>",
    "</details>",
    "<details>",
    "</pre>",
    "<!--",
    "-->",
    "&#64;x",
    "&lt;",
    "[x](https://evil.example)",
    "www.evil.example",
    "**b**",
    "_i_",
    "~~s~~",
    "\\",
    "\u202e",
    "\x00",
    "%",
    ":",
    ",",
    "::error::",
)
hostile = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=10).map(
    "".join
)

MENTION = re.compile(r"@[A-Za-z0-9]")
ISSUE_REF = re.compile(r"#\d|GH-\d", re.IGNORECASE)


# Characters that show nothing yet change what a reader sees: every format character (Cf:
# bidi marks and overrides, the BOM, tag characters), C0/C1 controls but the line breaks
# and tab, and Unicode's other default-ignorable code points (fillers, joiners, the
# supplementary variation selectors). The variation selectors U+FE00-FE0F stay: emoji
# need them. An oracle for the escaper, written from Unicode's categories and lists.
IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)


def hidden(char: str) -> bool:
    category = unicodedata.category(char)
    if category == "Cc":
        return char not in "\t\n\r"
    return category == "Cf" or any(low <= ord(char) <= high for low, high in IGNORABLE_RANGES)


def shown(value: str) -> str:
    """`value` without its hidden characters: what the escapers let through of it."""
    return "".join(char for char in value if not hidden(char))

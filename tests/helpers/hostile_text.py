"""Hostile strings for escaping tests: fragments that break Markdown, ping people, link, or
inject workflow commands, and the patterns that must not survive rendering. Shared by the
escaper's own tests and the report's."""

from __future__ import annotations

import re

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

"""Escaping untrusted strings for Markdown comments, workflow commands and terminals (pure).

Test ids, messages, hints, warnings and suite names come from results written by a run of
PR code, so a PR controls them. In a comment they must not inject HTML, break a table
row, start a code span, ping a person or team (`@name`), cross-reference an issue (which
GitHub records on that issue's timeline), or close a `<details>` early. In a workflow
command they must not end the command and start another (a newline followed by
`::set-output`, for instance).
"""

from __future__ import annotations

import re

# Joins what follows so GitHub's autolinkers no longer see `@name`, `#123`, `GH-1` or a
# URL, while the reader still does.
WORD_JOINER = "\u2060"

# Characters that reorder or hide text, removed wherever untrusted text is shown: C0/C1
# controls; every format character (Unicode category Cf: the bidi marks, embeddings,
# overrides and isolates of Trojan Source, U+061C, the BOM U+FEFF, the tag characters
# that spell invisible ASCII, the interlinear annotations, ...); the other
# default-ignorable code points (the combining grapheme joiner, Hangul and Khmer fillers,
# Mongolian selectors, the supplementary variation selectors); and lone surrogates (JSON
# can carry them; no UTF-8 writer accepts them). The variation selectors U+FE00-FE0F stay:
# emoji need them, and they reorder nothing. Issue 14, case 9 found U+061C, U+FEFF and tag
# characters passing; tests/untrusted checks the list against Python's Unicode database.
_INVISIBLE = re.compile(
    "["
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0 but tab and line breaks, DEL, C1
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufeff\uffa0\ufff0-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
    "\ud800-\udfff"
    "]"
)
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\t\u2028\u2029\x85]")
_AUTOLINKS = re.compile(r"://|www\.|GH-", re.IGNORECASE)

# Quotes are left alone: no untrusted string is ever placed inside an HTML attribute.
_MARKDOWN = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "|": "&#124;",
        "`": "&#96;",
        "\\": "&#92;",
        "*": "&#42;",
        "_": "&#95;",
        "[": "&#91;",
        "]": "&#93;",
        "~": "&#126;",
        "@": "@" + WORD_JOINER,
        "#": "#" + WORD_JOINER,
    }
)

ELLIPSIS = "…"


def clip(value: str, limit: int) -> str:
    """At most `limit` characters, marking a cut with an ellipsis."""
    return value if len(value) <= limit else value[: limit - 1] + ELLIPSIS


def text(value: str, limit: int = 200) -> str:
    """One line of inline Markdown, safe in a table cell, a list item or a heading."""
    flat = _LINE_BREAKS.sub(" ", _INVISIBLE.sub("", value))
    return _break_autolinks(clip(flat, limit).translate(_MARKDOWN))


def code(value: str, limit: int = 200) -> str:
    """Inline code for an untrusted string.

    A Markdown code span would show our entities literally, so this is an HTML `<code>`
    element whose content is escaped like any other text.
    """
    return f"<code>{text(value, limit)}</code>"


def block(value: str, limit: int = 4000) -> str:
    """A multi-line untrusted string as a `<pre>` block (its lines kept)."""
    lines = _INVISIBLE.sub("", value).replace("\r\n", "\n").replace("\r", "\n")
    escaped = _break_autolinks(clip(lines, limit).translate(_MARKDOWN))
    return f"<pre>{escaped.strip(chr(10))}</pre>"


def _break_autolinks(escaped: str) -> str:
    return _AUTOLINKS.sub(lambda match: _join(match.group(0)), escaped)


def _join(match_text: str) -> str:
    return match_text[:-1] + WORD_JOINER + match_text[-1]


# --- workflow commands ------------------------------------------------------------------
# https://docs.github.com/actions/reference/workflow-commands-for-github-actions: the
# runner unescapes %25, %0D and %0A in data, and additionally %3A and %2C in properties.

# ANSI/VT100 control sequences (colours, cursor moves, screen clears) as a whole, so no
# "[32m" is left behind when their ESC goes.
_TERMINAL_SEQUENCES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?")


def terminal(value: str, limit: int = 400) -> str:
    """One line of plain text for a terminal or a CI log: no control sequences (a server
    could clear the screen or forge lines), line breaks and other controls as spaces."""
    flat = _INVISIBLE.sub(" ", _LINE_BREAKS.sub(" ", _TERMINAL_SEQUENCES.sub("", value)))
    return clip(" ".join(flat.split()), limit)


_DATA = str.maketrans({"%": "%25", "\r": "%0D", "\n": "%0A"})
_PROPERTY = str.maketrans({"%": "%25", "\r": "%0D", "\n": "%0A", ":": "%3A", ",": "%2C"})
# An annotation is plain text where GitHub shows it, but it travels on (the checks API,
# tools that render it as Markdown): no tag, mention or issue reference survives in it
# (issue 30). Angle brackets become look-alike quotes, which no renderer reads as a tag
# and no reader misreads; mentions and references are broken as in a comment.
_PLAIN = str.maketrans(
    {"<": "\u2039", ">": "\u203a", "@": "@" + WORD_JOINER, "#": "#" + WORD_JOINER}
)


def command_data(value: str) -> str:
    """The message of a workflow command (an annotation): one line, nothing hidden, no
    HTML tag, mention or issue reference."""
    return _plain(value).translate(_DATA)


def command_property(value: str) -> str:
    """A `title=` of a workflow command: as `command_data`, and no separators."""
    return _plain(value).translate(_PROPERTY)


def command_file(value: str) -> str:
    """A `file=` of a workflow command: the path as it is (the annotation must land on
    that file), only its separators and hidden characters escaped."""
    return _visible(value).translate(_PROPERTY)


def _plain(value: str) -> str:
    return _break_autolinks(_visible(value).translate(_PLAIN))


def _visible(value: str) -> str:
    # An annotation shows on the PR's files view: an RLO there reorders it as in a comment.
    return _INVISIBLE.sub("", _SURROGATES.sub("\ufffd", value))

"""Escaping untrusted strings: Markdown (examples and properties) and workflow commands."""

from __future__ import annotations

import html
import re

from hostile_text import ISSUE_REF, MENTION, hostile, shown
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.untrusted import escape


def assert_no_autolinks(rendered: str) -> None:
    """After entity decoding (what GitHub's autolinkers see) nothing pings or links."""
    seen = html.unescape(rendered)
    assert not MENTION.search(seen)
    assert not ISSUE_REF.search(seen)
    assert "://" not in seen and "www." not in seen.lower()


def assert_inline_safe(rendered: str) -> None:
    assert not set(rendered) & set("<>|`\n\r\u2028\u202e\x00")
    assert not re.search(r"[*_~\[\]\\]", rendered)
    assert_no_autolinks(rendered)


@given(hostile)
def test_text_is_one_safe_line(value: str):
    assert_inline_safe(escape.text(value))


@given(hostile | st.text(alphabet="\x1b[]0123456789;mJK\x07\r\n\\ab", max_size=80))
def test_terminal_is_one_line_without_control_characters(value: str):
    shown = escape.terminal(value, 120)
    assert len(shown) <= 120
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202e]", shown)


def test_terminal_drops_whole_colour_and_cursor_sequences():
    redrawn = "\r\x1b[32mloading 10%\x1b[0m\r\x1b[2K\x1b[32mloading 20%\x1b[0m"
    assert escape.terminal(redrawn) == "loading 10% loading 20%"
    assert escape.terminal("\x1b]0;title\x07ok") == "ok"


@given(hostile)
def test_code_is_one_safe_code_element(value: str):
    rendered = escape.code(value)
    assert rendered.startswith("<code>") and rendered.endswith("</code>")
    assert_inline_safe(rendered[len("<code>") : -len("</code>")])


@given(hostile)
def test_block_keeps_lines_but_cannot_close_the_pre(value: str):
    rendered = escape.block(value)
    inner = rendered[len("<pre>") : -len("</pre>")]
    assert rendered.startswith("<pre>") and rendered.endswith("</pre>")
    assert "<" not in inner and ">" not in inner
    assert_no_autolinks(inner)


@given(st.text(), st.integers(min_value=1, max_value=300))
def test_clip_bounds_the_length(value: str, limit: int):
    assert len(escape.clip(value, limit)) <= limit


def test_text_examples():
    assert escape.text("a|b") == "a&#124;b"
    assert escape.text("hi @octocat") == "hi @\u2060octocat"
    assert escape.text("see #12") == "see #\u206012"
    assert escape.text("x\ny") == "x y"
    assert escape.text("<b>") == "&lt;b&gt;"
    assert escape.text("abcdef", limit=4) == "abc…"


def test_entities_in_the_input_are_shown_not_decoded():
    assert escape.text("&#64;x") == "&amp;#\u206064;x"


# --- workflow commands ------------------------------------------------------------------


def runner_unescape(value: str, *, property_: bool) -> str:
    """What the Actions runner does to a command's data or property value."""
    pairs = [("%0D", "\r"), ("%0A", "\n")]
    if property_:
        pairs += [("%3A", ":"), ("%2C", ",")]
    for escaped, raw in [*pairs, ("%25", "%")]:
        value = value.replace(escaped, raw)
    return value


def readable(value: str) -> str:
    """What a reader makes of an annotation: the look-alike quotes as angle brackets, the
    word joiners unseen."""
    return value.replace("\u2060", "").replace("\u2039", "<").replace("\u203a", ">")


def assert_plain(annotation: str) -> None:
    """No tag, mention or issue reference for whatever renders the annotation (issue 30)."""
    assert "<" not in annotation and ">" not in annotation
    assert_no_autolinks(annotation)


@given(hostile)
def test_command_data_round_trips_and_stays_on_one_line(value: str):
    escaped = escape.command_data(value)
    assert "\n" not in escaped and "\r" not in escaped
    # What shows, kept; what hides or reorders text (U+202E in an annotation), gone.
    unescaped = runner_unescape(escaped, property_=False)
    assert readable(unescaped) == readable(shown(value))
    assert_plain(unescaped)


@given(hostile)
def test_command_property_round_trips_without_separators(value: str):
    escaped = escape.command_property(value)
    assert not set(escaped) & set("\r\n:,")
    unescaped = runner_unescape(escaped, property_=True)
    assert readable(unescaped) == readable(shown(value))
    assert_plain(unescaped)


@given(hostile)
def test_a_file_property_keeps_the_path_as_it_is(value: str):
    escaped = escape.command_file(value)
    assert not set(escaped) & set("\r\n:,")
    assert runner_unescape(escaped, property_=True) == shown(value)


def test_command_examples():
    assert escape.command_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert escape.command_data("50%\r\n::set-env") == "50%25%0D%0A::set-env"
    assert escape.command_data('<img src=x onerror="alert(1)"> @octocat #7') == (
        '\u2039img src=x onerror="alert(1)"\u203a @\u2060octocat #\u20607'
    )
    assert escape.command_file("node_modules/@types/a<b>.py") == "node_modules/@types/a<b>.py"

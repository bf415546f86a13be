"""escape.py character class by character class: what must vanish, what must survive.

The older tests check that dangerous patterns are gone; these also check that the visible
text is still there, unchanged, so a filter that eats too much fails as surely as one that
lets too much through (issue 22's mutation run found both kinds of gap).
"""

from __future__ import annotations

import html
import unicodedata

import pytest
from hostile_text import hidden
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.untrusted import escape

WJ = escape.WORD_JOINER

REMOVED = {
    "C0 controls": [chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)]],
    "DEL and C1 controls": [chr(c) for c in range(0x7F, 0xA0)],
    "zero-width and direction marks": [chr(c) for c in range(0x200B, 0x2010)],
    "bidi embeddings and overrides": [chr(c) for c in range(0x202A, 0x202F)],
    "bidi isolates (Trojan Source)": [chr(c) for c in range(0x2066, 0x206A)],
    # Issue 14, case 9: these survived.
    "Arabic letter mark (bidi)": ["\u061c"],
    "byte order mark (zero-width no-break space)": ["\ufeff"],
    "tag characters (invisible ASCII)": [chr(c) for c in range(0xE0000, 0xE0080)],
    "word joiner, invisible operators, deprecated format": [chr(c) for c in range(0x2060, 0x2070)],
    "soft hyphen, fillers, other default-ignorables": [
        "\u00ad",
        "\u034f",
        "\u115f",
        "\u1160",
        "\u17b4",
        "\u180e",
        "\u3164",
        "\uffa0",
        "\U000e0100",
    ],
    "surrogates": ["\ud800", "\udbff", "\udc00", "\udfff"],
}


@pytest.mark.parametrize("kind", sorted(REMOVED))
def test_each_invisible_character_is_removed_and_the_text_around_it_kept(kind):
    for char in REMOVED[kind]:
        assert escape.text(f"ab{char}cd") == "abcd", f"U+{ord(char):04X}"
        assert escape.block(f"ab{char}cd") == "<pre>abcd</pre>", f"U+{ord(char):04X}"


@pytest.mark.parametrize("char", [chr(c) for c in range(0x2010, 0x2028)] + ["\u00a0", "\u00e9"])
def test_neighbours_of_the_filtered_ranges_are_kept(char):
    assert escape.text(f"a{char}b") == f"a{char}b"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a\r\nb", "a b"),  # one break, one space
        ("a\rb", "a b"),
        ("a\nb", "a b"),
        ("a\tb", "a b"),
        ("a\u2028b", "a b"),
        ("a\u2029b", "a b"),
    ],
)
def test_text_turns_each_line_break_into_one_space(value, expected):
    assert escape.text(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("see gh-1", f"see gh{WJ}-1"),
        ("see GH-1", f"see GH{WJ}-1"),
        ("www.example.com", f"www{WJ}.example.com"),
        ("WWW.EXAMPLE.COM", f"WWW{WJ}.EXAMPLE.COM"),
        ("https://example.com", f"https:/{WJ}/example.com"),
        ("HTTPS://EXAMPLE.COM", f"HTTPS:/{WJ}/EXAMPLE.COM"),
    ],
)
def test_autolinks_are_broken_whatever_the_case_and_nothing_is_lost(value, expected):
    assert escape.text(value) == expected


def test_clip_keeps_a_string_of_exactly_the_limit():
    assert escape.clip("abcde", 5) == "abcde"
    assert escape.clip("abcdef", 5) == "abcd" + escape.ELLIPSIS
    assert escape.text("x" * 200) == "x" * 200
    assert escape.text("x" * 201) == "x" * 199 + escape.ELLIPSIS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("  a\r\n  b\rc", "<pre>  a\n  b\nc</pre>"),  # CRLF, lone CR, leading spaces
        ("\n\na\n\n", "<pre>a</pre>"),
        ("a\n\nb", "<pre>a\n\nb</pre>"),
    ],
)
def test_block_normalises_line_ends_and_keeps_indentation(value, expected):
    assert escape.block(value) == expected


visible = st.text(
    st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")).filter(
        lambda char: not hidden(char)
    ),
    max_size=150,
)


@given(visible)
def test_text_round_trips_to_what_the_reader_sees(value):
    shown = html.unescape(escape.text(value)).replace(WJ, "")
    assert shown == value


@given(visible)
def test_block_round_trips_to_what_the_reader_sees(value):
    escaped = escape.block(value)
    assert escaped.startswith("<pre>") and escaped.endswith("</pre>")
    shown = html.unescape(escaped[len("<pre>") : -len("</pre>")]).replace(WJ, "")
    assert shown == value.strip("\n")


def test_default_limits_of_code_and_block():
    long = "a" * 5000
    assert escape.code(long) == f"<code>{escape.text(long, 200)}</code>"
    assert escape.block(long) == f"<pre>{escape.clip(long, 4000)}</pre>"


@pytest.mark.parametrize("command", [escape.command_data, escape.command_property])
def test_a_lone_surrogate_becomes_one_replacement_character(command):
    assert command("a\ud800b") == "a\ufffdb"


def test_every_format_character_is_removed_everywhere_untrusted_text_is_shown():
    # Cf, from the Unicode database itself: no list of ours can fall behind it.
    format_characters = [c for c in map(chr, range(0x110000)) if unicodedata.category(c) == "Cf"]
    assert len(format_characters) > 150
    sample = "a" + "".join(format_characters) + "b"
    assert escape.text(sample, 10_000) == "ab"
    assert escape.block(sample, 10_000) == "<pre>ab</pre>"
    assert escape.terminal(sample, 10_000) == "a b"
    assert escape.command_data(sample) == "ab"
    assert escape.command_property(sample) == "ab"


def test_an_emoji_keeps_its_variation_selector():
    assert escape.text("\u2764\ufe0f ok") == "\u2764\ufe0f ok"

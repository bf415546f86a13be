"""Which generated tokens llama-server keeps back (engines/llamacpp_withheld.py): llama.cpp's
`validate_utf8` rule, replayed over token bytes, and the alignment of reported entries."""

from __future__ import annotations

import pytest

from kl_bitexact.errors import EngineError
from kl_bitexact.run.engines.llamacpp_withheld import align, ends_mid_character, withheld

ZHONG = "中".encode()  # E4 B8 AD
GRIN = "😀".encode()  # F0 9F 98 80


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        (b"", False),
        (b"abc", False),
        (ZHONG, False),
        (ZHONG[:1], True),
        (ZHONG[:2], True),
        (GRIN[:3], True),
        (GRIN, False),
        ("é".encode()[:1], True),
        # A continuation byte alone is not "cut short": llama.cpp only looks for lead bytes.
        (b"\x80", False),
        (b"a\xb8", False),
        # A lead byte followed by ASCII still counts as waiting until enough bytes follow.
        (b"\xe4a", True),
        (b"\xe4ab", False),
        # Only the last four bytes are looked at.
        (b"\xf0" + b"abcd", False),
    ],
)
def test_ends_mid_character_follows_llama_cpp(text: bytes, cut: bool) -> None:
    assert ends_mid_character(text) is cut


def test_a_character_spread_over_byte_tokens_reports_only_its_last_byte() -> None:
    pieces = [b"a", ZHONG[:1], ZHONG[1:2], ZHONG[2:], b"b", GRIN[:2], GRIN[2:]]
    assert withheld(pieces) == [False, True, True, False, False, True, False]


def test_entries_are_placed_on_the_tokens_the_server_reported() -> None:
    # Byte tokens 228, 184, 173 spell 中; the repeated 184 is the trap for a greedy match.
    tokens = [228, 184, 184, 7]
    kept_back = withheld([b"\xe4", b"\xb8", b"\xb8", b"a"])
    assert kept_back == [True, True, False, False]
    entries = [{"id": 184, "logprob": -1.5}, {"id": 7, "logprob": -0.25}]
    assert align(tokens, entries, kept_back) == [None, None, -1.5, -0.25]


def test_entries_that_do_not_fit_the_rule_are_an_engine_error() -> None:
    with pytest.raises(EngineError, match="withholds tokens differently"):
        align([1, 2], [{"id": 2, "logprob": -1.0}], [False, False])
    with pytest.raises(EngineError, match="not a number"):
        align([1], [{"id": 1, "logprob": None}], [False])


def test_a_special_after_an_unfinished_character_is_appended_as_nothing() -> None:
    # /tokenize spells <s> out; the generation appends it as nothing, so the character
    # E4 .. B8 AD is still unfinished after it and <s> is kept back as well.
    pieces = [ZHONG[:1], b"<s>", ZHONG[1:2], ZHONG[2:], b"<s>"]
    asked: list[int] = []

    def special(index: int) -> bool:
        asked.append(index)
        return pieces[index] == b"<s>"

    assert withheld(pieces, special) == [True, True, True, False, False]
    assert asked == [1]  # asked only where the text was mid-character
    # Read as text, <s> would seem to end the character and be reported.
    assert withheld(pieces) == [True, False, False, False, False]

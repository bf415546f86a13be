"""Which generated tokens llama-server leaves out of its per-token probabilities (pure).

llama-server appends each sampled token's text to the generation's text and, when that text
then ends in the middle of a UTF-8 character, keeps the token back: no text is sent and no
probability is recorded (tools/server/server-context.cpp, `process_token`). Byte-fallback
tokens such as `<0xE4>` and byte-level BPE pieces cut inside a character do that all the
time. The token ids still come back (`return_tokens`), so this module replays the server's
rule (`validate_utf8` in server-common.cpp) over the tokens' bytes to tell which ids the
reported probabilities belong to.

The bytes must be those the generation appends, not those `/tokenize` spells: a special
token (`<unk>`, `<s>`: llama.cpp's UNKNOWN and CONTROL attributes) is appended as nothing
unless the server runs with `--special`, while `/tokenize` spells it out. Spelled out, a
special sampled right after an unfinished character would seem to end it, and the entries
would be placed wrongly. Only there does it matter: after complete text, "" and "<s>" leave
every later token's fate the same (the rule looks for unfinished lead bytes alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kl_bitexact.errors import EngineError

# (mask, lead byte pattern, bytes the character needs): UTF-8 lead bytes of 2, 3 and 4.
LEAD_BYTES = ((0xE0, 0xC0, 2), (0xF0, 0xE0, 3), (0xF8, 0xF0, 4))


def ends_mid_character(text: bytes) -> bool:
    """llama.cpp's `validate_utf8(text) < len(text)`: a lead byte among the last four
    whose character needs more bytes than follow it (continuation bytes are not checked)."""
    for distance in range(1, min(4, len(text)) + 1):
        byte = text[-distance]
        for mask, pattern, needed in LEAD_BYTES:
            if byte & mask == pattern and distance < needed:
                return True
    return False


def withheld(
    pieces: Sequence[bytes], renders_empty: Callable[[int], bool] = lambda index: False
) -> list[bool]:
    """For each generated token (its bytes as /tokenize spells them, in order): whether the
    server keeps it back. `renders_empty(i)`: whether token i is a special the generation
    appends as nothing; asked only where it matters (the text is mid-character before it)
    and only of text pieces (a special is text; a byte token is not)."""
    text = b""
    flags = []
    for index, piece in enumerate(pieces):
        if ends_mid_character(text) and _text(piece) and renders_empty(index):
            piece = b""
        text = (text + piece)[-4:]  # the rule looks at the last four bytes only
        flags.append(ends_mid_character(text))
    return flags


def _text(piece: bytes) -> bool:
    try:
        return bool(piece.decode("utf-8"))
    except UnicodeDecodeError:
        return False


def align(
    tokens: Sequence[int], entries: Sequence[Mapping[str, object]], kept_back: Sequence[bool]
) -> list[float | None]:
    """The logprob of each generated token, None where the server kept it back; an
    EngineError when the reported entries do not fit that rule."""
    reported = [token for token, back in zip(tokens, kept_back, strict=True) if not back]
    ids = [_int(entry.get("id")) for entry in entries]
    if ids != reported:
        raise EngineError(
            f"llama-server reported probabilities for tokens {ids[:8]}..., which do not match "
            f"the generated tokens {list(tokens)[:8]}... with those ending mid-character "
            "left out; this server withholds tokens differently from llama.cpp's rule"
        )
    logprobs = iter(_float(entry.get("logprob")) for entry in entries)
    return [None if back else next(logprobs) for back in kept_back]


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineError(f"llama-server sent a token id {value!r}, not an integer")
    return value


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EngineError(f"llama-server sent a logprob {value!r}, not a number")
    return float(value)

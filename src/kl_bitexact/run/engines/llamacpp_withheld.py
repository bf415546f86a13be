"""Which generated tokens llama-server leaves out of its per-token probabilities (pure).

llama-server appends each sampled token's text to the generation's text and, when that text
then ends in the middle of a UTF-8 character, keeps the token back: no text is sent and no
probability is recorded (tools/server/server-context.cpp, `process_token`). Byte-fallback
tokens such as `<0xE4>` and byte-level BPE pieces cut inside a character do that all the
time. The token ids still come back (`return_tokens`), so this module replays the server's
rule (`validate_utf8` in server-common.cpp) over the tokens' bytes to tell which ids the
reported probabilities belong to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def withheld(pieces: Sequence[bytes]) -> list[bool]:
    """For each generated token (its bytes, in order): whether the server keeps it back."""
    text = b""
    flags = []
    for piece in pieces:
        text = (text + piece)[-4:]  # the rule looks at the last four bytes only
        flags.append(ends_mid_character(text))
    return flags


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

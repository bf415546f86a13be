"""Answer decoders take whatever JSON a server sent: a wrong type is the server's fault.

A decoder reads fields with `float()`, `int()`, `[...]` and `.get()`; on an answer with a
string where a logprob belongs, a list where an object belongs, or a missing key, those
raise ValueError, TypeError, KeyError, IndexError or AttributeError. `@decoder` turns
them into an EngineError naming the decoder, so that one test errors and the run goes
on (an uncaught ValueError would end the whole run as an internal error).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from kl_bitexact.errors import EngineError

P = ParamSpec("P")
R = TypeVar("R")

_MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError)
_DETAIL_CHARS = 200


def decoder(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a pure function of a server's answer; `what` names the answer in errors."""

    def wrap(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def decode(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except _MALFORMED as error:
                detail = f"{type(error).__name__}: {error}"[:_DETAIL_CHARS]
                raise EngineError(
                    f"the server's {what} is malformed ({detail})",
                    hint="is the server the engine the suite names, and a supported version?",
                ) from None

        return decode

    return wrap

"""What wraps a command's handler: the cycle collector paused while results are built,
the SyntaxWarnings of a repository's Python kept out of our output."""

from __future__ import annotations

import argparse
import functools
import gc
import warnings
from collections.abc import Callable

# `typing` only for mypy (`report --help` imports this module; typing is a tenth of it).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")


def cycle_collector_paused(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A handler that loads, compares and renders results with Python's cycle collector
    paused, as it was before after it.

    Results, deltas and report rows are hundreds of thousands of objects without reference
    cycles, freed by their reference counts; the collector only walks them, again at every
    collection while they grow (after a decode, each later phase pays for the earlier ones':
    a quarter of `report`'s CPU on 20,000 tests). The command ends soon after, so the few
    cycles it leaves (exceptions, an HTTP client's) wait at most until the process exits."""

    @functools.wraps(handler)
    def handle(args: argparse.Namespace) -> int:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return handler(args)
        finally:
            if was_enabled:
                gc.enable()

    return handle


def reads_python(work: Callable[P, R]) -> Callable[P, R]:
    """A handler (or a command's work, called in process by the action) that parses a
    repository's Python, never runs it: the SyntaxWarnings its sources would raise when
    compiled (an invalid escape, `1if`) are their authors' business, not lines in our output
    (found by tests/test_fuzz.py)."""

    @functools.wraps(work)
    def quiet(*args: P.args, **kwargs: P.kwargs) -> R:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return work(*args, **kwargs)

    return quiet

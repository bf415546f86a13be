"""A registration call of keyword literals is read without `ast.parse` (issue 40: parsing
each call was a third of a cold scan of sglang). Property: for any call text, the reader
either leaves it to the parse, or gives the name, line and keyword values the parse gives;
and it never reads a text the parse refuses."""

from __future__ import annotations

import ast
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kl_bitexact.registry import scan, toplevel

NAMES = ("register_cuda_ci", "register_amd_ci", "register_x_ci")
KEYWORDS = ("est_time", "suite", "nightly", "disabled", "stage", "if", "lambda_", "x1", "_a")
LITERALS = (
    "60", "0", "007", "1.5", "0.25", "1_000", "-5", "1e3", "9" * 19, "9" * 18, "True", "False",
    "None", "Trueish", '"s"', "'s'", '""', '"a#b"', '"a\\"b"', '"x=1, nightly=True"',
    "r'raw'", "f'x'", '"é"', '"a\x00b"', '"a\rb"', '"a\x0cb"', "x", "[1]", '"a" "b"',
)  # fmt: skip
GAPS = ("", " ", "\n", "\n    ", "  # c\n", "# nightly=True\n", "\t", "\x0c", "\r\n", "# a\rb=1\n")
TAILS = ("", "\n", "\n\n", "  # done\n", "\n# comment\n", "\n)\n", "; y = 1\n", "\n    z\n", "\x00")


@st.composite
def call_texts(draw: st.DrawFn) -> str:
    parts = [draw(st.sampled_from(NAMES)), draw(st.sampled_from(("(", " (")))]
    for index in range(draw(st.integers(0, 4))):
        if index:
            parts.append(draw(st.sampled_from(GAPS)) + ",")
        parts.append(draw(st.sampled_from(GAPS)))
        if draw(st.integers(0, 9)) == 0:
            parts.append(draw(st.sampled_from(LITERALS)))  # positional
        else:
            equals = draw(st.sampled_from(("=", " = ", "\n=")))
            keyword = draw(st.sampled_from(KEYWORDS))
            parts.append(keyword + equals + draw(st.sampled_from(LITERALS)))
    parts += [draw(st.sampled_from(("", ",", " ,"))), draw(st.sampled_from(GAPS)), ")"]
    return "".join(parts) + draw(st.sampled_from(TAILS))


def _parsed(text: str, line: int) -> Any:
    try:
        module = ast.parse("\n" * (line - 1) + text)
    except (SyntaxError, ValueError):
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Expr):
        return None
    call = module.body[0].value
    return call if isinstance(call, ast.Call) else None


@settings(max_examples=600, deadline=None)
@given(call_texts(), st.integers(1, 40))
def test_a_literal_call_reads_as_the_parse_reads_it(text: str, line: int) -> None:
    read = toplevel._literal_call(text, line)
    if read is None:
        return  # the parse decides
    call = _parsed(text, line)
    assert call is not None, f"read a text Python refuses: {text!r}"
    assert not call.args
    assert isinstance(call.func, ast.Name)
    assert (read.name, read.lineno) == (call.func.id, call.lineno)
    parsed = [(keyword.arg, scan._literal(keyword.value)) for keyword in call.keywords]
    assert [(name, value, type(value)) for name, value in read.keywords] == [
        (name, value, type(value)) for name, value in parsed
    ]


def test_ordinary_registrations_are_read_without_parsing() -> None:
    source = 'import x\n\nregister_cuda_ci(\n    est_time=60,  # suite="ghost"\n    suite="s",\n)\n'
    located = toplevel.locate(source, frozenset(scan.REGISTER_FUNCTIONS))
    assert located is not None
    [call] = located.calls
    assert isinstance(call, toplevel.LiteralCall)
    assert (call.lineno, call.keywords) == (3, (("est_time", 60), ("suite", "s")))

"""What a command writes besides its product on stdout: files, never through a symlink or
into a FIFO, and notices on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

from kl_bitexact.untrusted.jsonfile import append_text, replace_text


def say_notice(line: str | None) -> None:
    """A line on stderr that says why a command found less to do than asked (no deltas, no
    test to prove): standard output stays the command's product (Markdown, a matrix)."""
    if line:
        print(line, file=sys.stderr)


def write_output(path: Path, text: str, *, append: bool = False) -> None:
    """Write (a new file in the path's place) or append (to a regular file only): never
    through a symlink or into a FIFO a run of PR code left there (issue 14, case 9)."""
    if append:
        append_text(path, text)
    else:
        replace_text(path, text)

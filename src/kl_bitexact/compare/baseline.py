"""The base branch's results, or the reason there are none.

A file named that does not exist is a usage error (a typo: the report would otherwise show
no deltas and say why only inside the comment, issue 27). A baseline that exists but
cannot be used (another schema version, damaged), or that GitHub has none of yet
(`publish --fetch-baseline`), is reported as such ("baseline unavailable: ..."), never read
as an empty run, and never stops the report: the head's own verdicts still stand.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results
from kl_bitexact.untrusted import escape


@dataclass(frozen=True)
class Baseline:
    results: Results | None = None
    unavailable: str = "no baseline given"  # why `results` is None

    @classmethod
    def of(cls, base: Results | None) -> Baseline:
        return cls() if base is None else cls(base, "")

    @cached_property
    def incomplete(self) -> str:
        """Why a baseline that loaded excuses nothing (issue 30): a base run that did not
        finish, or planned tests it has no result for. Its red tests are still shown (and
        named still failing), but only a whole base run's red says the change did not
        cause it. Empty when complete, or when completeness was not recorded.

        Worked out once: the gate asks for every test, and the answer walks the whole base
        run (asked per test, `report --baseline` was quadratic: 25 s at 10k tests, issue 40)."""
        results = self.results
        if results is None:
            return ""
        if results.run.finished is False:
            return "the base run did not finish (interrupted or aborted)"
        missing = len(results.missing())
        if missing:
            tests = "planned test" if missing == 1 else "planned tests"
            return f"the base run has no result for {missing} {tests}"
        return ""


def load(path: Path | None) -> Baseline:
    """The baseline at `path`; another schema version or a damaged file is a reason, a
    missing file an error."""
    if path is None:
        return Baseline()
    if not path.exists() and not path.is_symlink():
        raise ConfigError(
            f"--baseline {path}: no such file",
            hint="pass the base branch's results.json, or leave --baseline out for a report "
            "without deltas (`publish --fetch-baseline` finds it on GitHub)",
        )
    try:
        return Baseline.of(results_io.load(path))
    except ConfigError as error:
        return Baseline(None, error.message)


def notice(found: Baseline) -> str | None:
    """The one line a terminal gets when a baseline was asked for and cannot be used (the
    comment says it too, but nobody reads a comment they did not post)."""
    if found.results is not None or found.unavailable == Baseline().unavailable:
        return None
    return (
        f"kl-bitexact: no deltas: baseline unavailable: {escape.terminal(found.unavailable, 400)}"
    )

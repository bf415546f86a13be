"""The engine repository's change (base..head) as the functions it touched, read with git
from the checkout the servers run (`run --reach-diff BASE`), and afterwards what the
suites executed of them: per test from the probes, per line from coverage.py.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.reach import diff

MAX_DIFF_BYTES = 64 * 1024 * 1024
MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_FUNCTIONS = 2000
GIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ChangedCode:
    """What a run probes for the PR's change: its functions and the files holding them."""

    base: str
    head: str
    repository: Path
    functions: tuple[diff.Function, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(function.name for function in self.functions)

    @property
    def files(self) -> tuple[Path, ...]:
        """The changed files, absolute (coverage.py measures only these)."""
        paths = dict.fromkeys(function.path for function in self.functions)
        return tuple((self.repository / path).resolve() for path in paths)


def changed_code(repository: Path, revisions: str) -> ChangedCode:
    """`BASE` (its merge base with HEAD, to HEAD, as GitHub shows a PR) or `BASE..HEAD`;
    the head must be what is checked out, since that is what the servers run."""
    base, _, head = revisions.partition("..")
    head = head or "HEAD"
    checked_out = _git(repository, "rev-parse", "HEAD").strip()
    if _git(repository, "rev-parse", f"{head}^{{commit}}").strip() != checked_out:
        raise ConfigError(
            f"--reach-diff {revisions}: {head} is not the checked-out commit of {repository}",
            hint="check out the PR's head (what the servers run) and give the base alone",
        )
    merge_base = _git(repository, "merge-base", base, "HEAD").strip()
    text = _git(
        repository,
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--unified=0",
        merge_base,
        "HEAD",
        "--",
        "*.py",
    )
    found = _functions(repository, diff.changed_lines(text))
    return ChangedCode(merge_base, checked_out, repository, tuple(found[:MAX_FUNCTIONS]))


def _functions(repository: Path, lines: dict[str, set[int]]) -> list[diff.Function]:
    def is_package(directory: str) -> bool:
        return (repository / directory / "__init__.py").is_file()

    found: list[diff.Function] = []
    for path, changed in sorted(lines.items()):
        module = diff.module_name(path, is_package)
        source = repository / path
        if module is None or not source.is_file() or source.stat().st_size > MAX_SOURCE_BYTES:
            continue
        text = source.read_text(encoding="utf-8", errors="replace")
        found.extend(diff.functions(text, module, path, changed))
    return found


def _git(repository: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repository), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(f"--reach-diff: git {args[0]} in {repository} failed: {error}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines() or ["failed"]
        raise ConfigError(
            f"--reach-diff: git {' '.join(args[:3])} in {repository}: {said[-1]}",
            hint="give a revision of the engine repository the run starts in (e.g. origin/main); "
            "a shallow clone has no base to diff against: fetch it (actions/checkout with "
            "fetch-depth: 0)",
        )
    if len(done.stdout) > MAX_DIFF_BYTES:
        raise ConfigError(f"--reach-diff: the diff is over {MAX_DIFF_BYTES} bytes")
    return done.stdout.decode("utf-8", errors="replace")

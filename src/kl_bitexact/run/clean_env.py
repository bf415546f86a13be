"""Keep GitHub's credentials and the action's inputs out of reach of the repository's code.

A suite's server (and a pytest suite) is the PR's code. It runs as the same user as every
kl-bitexact process above it, so it can read each ancestor's `/proc/<pid>/environ`, which
is the environment the process was *started* with: removing a variable afterwards (or
only from a child's environment) changes nothing there (issue 14, case 7). So a process
that is about to launch such code and holds a credential starts over first: `exec` of
itself with the credentials and INPUT_* variables left out, before any child exists.

Only GitHub's own credentials are removed: by name, or by value (a value GitHub issues,
`ghp_...`, `github_pat_...`, under any name: MY_CI_GITHUB_PAT). Other secrets a job hands
the run step (`HF_TOKEN` for a gated model, say) may be what the server needs, so they stay,
and the warning names them: the advice is to keep secrets out of the job that runs the PR's
code.

A restart cleans this process, not its ancestors: a step's shell that started
`kl-bitexact run` with a token in its environment keeps it, readable by the suite in
`/proc/<pid>/environ` (issue 30). So the ancestors are read as the suite could read them;
under GitHub Actions a secret found there stops the command before anything starts (exit 2,
naming the variables and the process), elsewhere (a developer's own shell, running their
own code) it is a loud warning. The words say what is true: no "cannot read" while one can.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.errors import FatalError
from kl_bitexact.untrusted import escape

# What the Actions runner or a workflow hands a step that can act on GitHub as this
# repository: the job token under its usual names, the runtime token (artifacts, cache)
# and the OIDC request token (cloud credentials).
CREDENTIALS = (
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
)
INPUT_PREFIX = "INPUT_"  # an action's inputs, as the runner passes them
# Set in the restarted process's environment: the warning was given before the restart.
RESTARTED = "KL_BITEXACT_CLEAN_RESTART"
# /proc/PID/environ holds at most the kernel's argument limit (a few MiB); read that much.
_MAX_PROC_BYTES = 8 * 1024 * 1024
_SECRET_LIKE = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|API_KEY|ACCESS_KEY|CREDENTIAL|(?:^|_)PAT(?:_|$)",
    re.I,
)
# What GitHub's tokens start with (personal, OAuth, user-to-server, server-to-server,
# refresh, fine-grained): such a value is a GitHub credential whatever its variable's name.
_GITHUB_TOKEN_VALUE = re.compile(r"^(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{16,}")


def github_credential(name: str, value: str) -> bool:
    """A GitHub credential: one of its usual names, or a value GitHub issued."""
    return name in CREDENTIALS or bool(_GITHUB_TOKEN_VALUE.match(value))


# Names that look secret and are not (docs/cli.md lists them): a word of the pattern above
# that names tokens of text (tokenizers) rather than a credential, and names ending in a
# word for a place or a switch (`*_DIR`, `*_PATH`, `*_FILE`: where something is, not what;
# TIKTOKEN_CACHE_DIR tripped the warning, issue 31). A credential's own name never ends so;
# a file holding one (HF_TOKEN_PATH) is named here, its contents stay out of the environment.
NOT_SECRETS = frozenset(
    {
        "TOKENIZERS_PARALLELISM",  # Hugging Face tokenizers' thread switch
        "TIKTOKEN_CACHE_DIR",
        "TIKTOKEN_ENCODINGS_BASE",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    }
)
NOT_SECRET_SUFFIXES = ("_DIR", "_PATH", "_FILE", "_CACHE", "_PARALLELISM")


def secret_like(name: str) -> bool:
    """The one rule for "this variable's name says it holds a secret": a word of
    `_SECRET_LIKE`, unless `NOT_SECRETS` or `NOT_SECRET_SUFFIXES` say the name is known
    not to (TIKTOKEN_CACHE_DIR names a directory)."""
    upper = name.upper()
    if upper in NOT_SECRETS or upper.endswith(NOT_SECRET_SUFFIXES):
        return False
    return bool(_SECRET_LIKE.search(name))


def removed(environ: Mapping[str, str]) -> list[str]:
    """The variables a clean environment leaves out, sorted."""
    return sorted(
        name
        for name, value in environ.items()
        if github_credential(name, value) or name.startswith(INPUT_PREFIX)
    )


def clean(environ: Mapping[str, str]) -> dict[str, str]:
    dropped = set(removed(environ))
    return {name: value for name, value in environ.items() if name not in dropped}


def kept_secrets(environ: Mapping[str, str]) -> list[str]:
    """Secret-looking variables a clean environment still passes on (a server may need them)."""
    left = clean(environ)
    return sorted(name for name, value in left.items() if value and secret_like(name))


def removed_credentials(environ: Mapping[str, str]) -> list[str]:
    """The GitHub credentials (non-empty) a clean restart takes out of this process."""
    return sorted(
        name for name, value in environ.items() if value and github_credential(name, value)
    )


@dataclass(frozen=True)
class Exposed:
    """An ancestor whose environment the suite can read, and the secrets it holds there."""

    pid: int
    command: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"{', '.join(self.names)} in process {self.pid} ({self.command})"


def exposed_in_ancestors(
    environ: Mapping[str, str], proc: Path = Path("/proc"), start: int | None = None
) -> list[Exposed]:
    """Ancestors, parent first, holding a GitHub credential or a secret-like variable the
    suite does not get from this process anyway (those are named by `warning`). Read as the
    suite would: a process whose environment this user cannot read is no exposure."""
    passed_on = set(kept_secrets(environ))
    found: list[Exposed] = []
    pid, seen = os.getppid() if start is None else start, set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        names = _secrets_held(_environ_of(proc / str(pid)), passed_on)
        if names:
            found.append(Exposed(pid, _read(proc / str(pid) / "comm").strip(), tuple(names)))
        pid = _parent_of(proc / str(pid))
    return found


def _secrets_held(environ: Mapping[str, str], passed_on: set[str]) -> list[str]:
    """A GitHub credential always; another secret unless this process passes it on too."""
    return sorted(
        name
        for name, value in environ.items()
        if value
        and (github_credential(name, value) or (secret_like(name) and name not in passed_on))
    )


def _environ_of(process: Path) -> dict[str, str]:
    raw = _read(process / "environ")
    pairs = (entry.partition("=") for entry in raw.split("\0") if "=" in entry)
    return {name: value for name, _, value in pairs}


def _parent_of(process: Path) -> int:
    """The parent's pid from `stat` (its fourth field, after the command in parentheses,
    which may itself hold spaces and parentheses); 0 when unknown."""
    fields = _read(process / "stat").rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def _read(path: Path) -> str:
    try:
        with path.open("rb") as file:
            return file.read(_MAX_PROC_BYTES).decode("utf-8", "replace")
    except OSError:  # gone, or not ours to read (then the suite cannot either)
        return ""


def warning(environ: Mapping[str, str], exposed: Sequence[Exposed] = ()) -> str | None:
    """What to tell the user about secrets within the suite's reach, if anything; its
    words depend on `exposed` (an ancestor holding the credentials this process drops)."""
    credentials = removed_credentials(environ)
    others = kept_secrets(environ)
    if not credentials and not others and not exposed:
        return None
    parts = []
    if credentials and not exposed:
        parts.append(
            f"{', '.join(credentials)} in this step's environment: kl-bitexact restarts "
            "without them, so the suite's processes cannot read them, but any other step of "
            "this job that runs the PR's code can"
        )
    if exposed:
        parts.append(
            f"{'; '.join(map(str, exposed))}, above this kl-bitexact: the suite's processes "
            "(the PR's code) can read them there (/proc/PID/environ)"
        )
    if others:
        parts.append(f"{', '.join(others)} reach the suite's processes (a server may need them)")
    return "; ".join(parts) + ". Keep tokens and secrets out of the job that runs the PR's code."


def warn(environ: Mapping[str, str], exposed: Sequence[Exposed] | None = None) -> None:
    """The warning, as a workflow annotation under GitHub Actions, else on stderr (once:
    not again in the restarted process). Under GitHub Actions an ancestor holding a secret
    is no warning but a refusal: the run would hand the PR's code a readable token."""
    if environ.get(RESTARTED):
        return
    exposed = exposed_in_ancestors(environ) if exposed is None else exposed
    text = warning(environ, exposed)
    if text is None:
        return
    github = environ.get("GITHUB_ACTIONS") == "true"
    if exposed and github:
        raise FatalError(
            f"refusing to run the suite: {text.partition('. Keep')[0]}",
            hint="pass tokens only to the step that publishes (its own `env:`), never at the "
            "job level of the job that runs the PR's code; a step that must hold one can "
            "`exec kl-bitexact ...`, so that no shell holding it stays above the suite",
        )
    if github:
        print(f"::warning title=kl-bitexact::{escape.command_data(text)}", flush=True)
    else:
        print(f"kl-bitexact: warning: {text}", file=sys.stderr, flush=True)


def restart_clean(arguments: Sequence[str], environ: Mapping[str, str]) -> None:
    """`exec` `python -m kl_bitexact ARGUMENTS` without the removed variables, when there
    are any (else return: the environment is already clean). Never returns otherwise."""
    if not removed(environ):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    command = [sys.executable, "-m", "kl_bitexact", *arguments]
    os.execve(sys.executable, command, {**clean(environ), RESTARTED: "1"})

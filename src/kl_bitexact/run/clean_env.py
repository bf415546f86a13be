"""Keep GitHub's credentials and the action's inputs out of reach of the repository's code.

A suite's server (and a pytest suite) is the PR's code. It runs as the same user as every
kl-bitexact process above it, so it can read each ancestor's `/proc/<pid>/environ`, which
is the environment the process was *started* with: removing a variable afterwards (or
only from a child's environment) changes nothing there (issue 14, case 7). So a process
that is about to launch such code and holds a credential starts over first: `exec` of
itself with the credentials and INPUT_* variables left out, before any child exists.

Only GitHub's own credentials are removed. Other secrets a job hands the run step
(`HF_TOKEN` for a gated model, say) may be what the server needs, so they stay, and the
warning names them: the advice is to keep secrets out of the job that runs the PR's code.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

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
_SECRET_LIKE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|API_KEY|CREDENTIAL", re.I)


def removed(environ: Mapping[str, str]) -> list[str]:
    """The variables a clean environment leaves out, sorted."""
    return sorted(name for name in environ if name in CREDENTIALS or name.startswith(INPUT_PREFIX))


def clean(environ: Mapping[str, str]) -> dict[str, str]:
    dropped = set(removed(environ))
    return {name: value for name, value in environ.items() if name not in dropped}


def kept_secrets(environ: Mapping[str, str]) -> list[str]:
    """Secret-looking variables a clean environment still passes on (a server may need them)."""
    left = clean(environ)
    return sorted(name for name, value in left.items() if value and _SECRET_LIKE.search(name))


def warning(environ: Mapping[str, str]) -> str | None:
    """What to tell the user about credentials in the step's environment, if anything."""
    credentials = [name for name in removed(environ) if name in CREDENTIALS and environ[name]]
    others = kept_secrets(environ)
    if not credentials and not others:
        return None
    parts = []
    if credentials:
        parts.append(
            f"{', '.join(credentials)} in this step's environment: kl-bitexact restarts "
            "without them, so the suite's processes cannot read them, but any other step of "
            "this job that runs the PR's code can"
        )
    if others:
        parts.append(f"{', '.join(others)} reach the suite's processes (a server may need them)")
    return "; ".join(parts) + ". Keep tokens and secrets out of the job that runs the PR's code."


def warn(environ: Mapping[str, str]) -> None:
    """The warning, as a workflow annotation under GitHub Actions, else on stderr (once:
    not again in the restarted process)."""
    text = None if environ.get(RESTARTED) else warning(environ)
    if text is None:
        return
    if environ.get("GITHUB_ACTIONS") == "true":
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

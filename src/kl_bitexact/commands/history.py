"""`kl-bitexact history`: every test's numbers across the base branch's recent runs.

For a maintainer triaging the base branch: which tests failed or were flaky there, in how
many of the last N runs and since which commit, and whose numbers changed at all (a
bit-exact test's numbers are identical run to run). Offline from `--history-dir DIR`, or
fetched from GitHub (the same runs and rules as `publish --fetch-history`).
"""

from __future__ import annotations

import argparse
import os
import sys

from kl_bitexact.commands import Command, arguments
from kl_bitexact.compare.history import History
from kl_bitexact.errors import ConfigError

# Paragraphs as single lines: `kl-bitexact --help` wraps them to the terminal (cli.py).
DESCRIPTION = (
    "Every test's numbers (status, avg KL, differing logprobs, cache hits) across the base "
    "branch's last N runs, oldest first: how many runs each test failed or was flaky in, since "
    "which commit, and whether its numbers ever changed. Prints the tests that failed or "
    "changed, with a trend (one glyph per run: ✓ passed, ✗ failed, ~ flaky, ! error, - not run "
    "or skipped, _ not in that run, then each changed number run by run); --all prints every "
    "test; --json prints it all for machines.\n"
    "\n"
    "Offline: --history-dir DIR, one results file per run. Online: --repo and --workflow name "
    "the runs (push runs of this repository's code on --branch, whose commit is on the branch, "
    "each run's kl-bitexact-results artifact, whatever the run's conclusion); the token comes "
    "from GITHUB_TOKEN (actions: read, contents: read), the API from GITHUB_API_URL. Fetched "
    "archives are kept in --history-cache, so the next fetch downloads only new runs and "
    "--history-dir on that directory reads the same history offline.\n"
    "\n"
    "  kl-bitexact history --repo sgl-project/sglang --workflow bitexact.yml --branch main\n"
    "  kl-bitexact history --history-dir ~/.cache/kl-bitexact/history/... --json\n"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_history_arguments(parser)
    parser.add_argument(
        "--repo",
        default=os.environ.get("GITHUB_REPOSITORY"),
        metavar="OWNER/NAME",
        help="fetch the history of this repository (default: $GITHUB_REPOSITORY)",
    )
    parser.add_argument(
        "--workflow",
        metavar="FILE",
        help="the workflow file whose runs upload the results artifact, e.g. bitexact.yml",
    )
    parser.add_argument("--branch", default="main", help="the base branch (default: %(default)s)")
    parser.add_argument(
        "--artifact",
        default="kl-bitexact-results",
        metavar="NAME",
        help="the results artifact's name (default: %(default)s)",
    )
    parser.add_argument(
        "--event",
        action="append",
        metavar="EVENT",
        help="a run of this event on the branch counts (repeatable; default: push)",
    )
    arguments.add_history_fetch_arguments(parser)
    parser.add_argument("--all", action="store_true", help="print every test, steady ones too")
    parser.add_argument(
        "--json", action="store_true", help="print the history as JSON (every test)"
    )


def handle(args: argparse.Namespace) -> int:
    history = _history(args)
    if args.json:
        import msgspec

        from kl_bitexact.report.history import as_json

        # One line of compact UTF-8, by msgspec's encoder: indented, the pure-Python encoder
        # took 2 s of a warm fetch's CPU to print 20 runs x 1,000 tests' points, json's C
        # encoder 0.05 s of its 0.5, msgspec's 0.007 (issue 40). `jq .` indents it.
        _write_bytes(msgspec.json.encode(as_json(history)) + b"\n")
    else:
        from kl_bitexact.report.history import terminal_lines

        sys.stdout.write("\n".join(terminal_lines(history, show_all=args.all)) + "\n")
    return 0


def _write_bytes(data: bytes) -> None:
    """All of `data` to standard output. A write to a pipe can take part of it and say so
    rather than fail (the reader went away: `history --json | head -c 100`); the next one
    raises BrokenPipeError, which ends the command as a closed stdout does (exit 141)."""
    sys.stdout.flush()
    left = memoryview(data)
    while left:
        left = left[sys.stdout.buffer.write(left) :]


def _history(args: argparse.Namespace) -> History:
    if args.history_dir is not None:
        # Imported here: a fetch needs none of the results, proofs and shards it reads.
        from kl_bitexact.commands import input_files

        found = input_files.history_from_dir(args.history_dir, args.history_runs)
        assert found is not None
        return found
    if not args.repo or not args.workflow:
        raise ConfigError(
            "no history to show: pass --history-dir DIR, or --repo OWNER/NAME and "
            "--workflow FILE to fetch it",
            hint="e.g. kl-bitexact history --repo acme/engine --workflow bitexact.yml",
        )
    return _fetched(args)


def _fetched(args: argparse.Namespace) -> History:
    # Imported here: PyGithub and requests only when fetching.
    from kl_bitexact.publish import baseline_fetch, history_fetch
    from kl_bitexact.publish.client import ClientSettings, open_session

    events = tuple(args.event or baseline_fetch.DEFAULT_EVENTS)
    bounds = history_fetch.Bounds(runs=args.history_runs, deadline_s=args.history_timeout)
    cache = args.history_cache or history_fetch.default_cache()
    settings = ClientSettings.from_env(os.environ)
    with open_session(os.environ, settings=settings, repository=args.repo) as session:
        repository = session.target.repository
        wanted = baseline_fetch.Wanted(
            repository, args.workflow, args.branch, args.artifact, events
        )
        return history_fetch.fetch(session, wanted, cache, bounds)


COMMAND = Command(
    name="history",
    summary="every test's numbers across the base branch's recent runs (new or known failures)",
    description=DESCRIPTION,
    add_arguments=add_arguments,
    handler=handle,
)

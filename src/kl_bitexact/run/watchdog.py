"""Stops a launched server's process group when the run that launched it is gone.

`run` holds the write end of a pipe whose read end is this process's stdin. However the
run ends - normally, by an exception, or by SIGKILL, which runs no cleanup at all - the
kernel closes that write end, and the read here returns end-of-file. If the server's
group is still alive then, the run could not stop it: this process walks the same
ladder (interrupt, terminate, kill) and notes it in the server's log.

Run as a script (`python watchdog.py PGID LOG INTERRUPT_S TERMINATE_S KILL_S`) in a
session of its own, so that a terminal's signals aimed at the run do not reach it. It
imports only the standard library: it must start fast and cannot fail on the package.

`kl-bitexact pytest` tells it more through the pipe, one line each, before it closes
(issue 30, item 6): `group PGID` (pytest's group, known once pytest started: PGID 0 on the
command line), `sweep NAME=VALUE` (a variable in the environment of everything pytest
started: a test's server in a session of its own is outside the group, and is found by it)
and `journal DIR` (the proof's journal of base files replaced by the head's: put back, as
`restore_journal` does for the normal path too).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import sys
import time

# On Linux the kernel has already sent the leader SIGTERM (its parent-death signal) when
# the pipe closes: the first step only waits, so that no second signal hits a server in
# the middle of its own clean shutdown. Elsewhere the first step interrupts.
_FIRST = signal.SIGINT if not sys.platform.startswith("linux") else None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def note(log: str, line: str) -> None:
    # The log sits where the server (the PR's code) can write: never through a link it
    # put in the log's place, never into a FIFO (issue 14, case 9).
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(log, flags, 0o666)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, f"[kl-bitexact watchdog] {line}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def stop(pgid: int, log: str, waits: list[float]) -> None:
    ladder = zip((_FIRST, signal.SIGTERM, signal.SIGKILL), waits, strict=True)
    for signum, wait_s in ladder:
        if not group_alive(pgid):
            return
        if signum is None:
            note(log, f"the run is gone; waiting {wait_s:g} s for the server group {pgid} to exit")
        else:
            note(log, f"the run is gone; sending {signum.name} to the server group {pgid}")
            try:
                os.killpg(pgid, signum)
            except ProcessLookupError:
                return
        deadline = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)


def marked(marker: str) -> list[int]:
    """The processes (but this one) whose environment holds `marker` (NAME=VALUE): every
    process the run started, whatever its session. A zombie's environment reads empty."""
    needle = b"\0" + marker.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = b"\0" + handle.read()
        except OSError:
            continue
        if needle in environ + b"\0":
            found.append(int(entry))
    return found


def sweep(marker: str, log: str, waits: list[float]) -> None:
    """Terminate, then kill, every process that still holds `marker`."""
    for signum, wait_s in ((signal.SIGTERM, waits[1]), (signal.SIGKILL, waits[2])):
        pids = marked(marker)
        if not pids:
            return
        note(log, f"sending {signum.name} to {len(pids)} process(es) the run started: {pids}")
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signum)
        deadline = time.monotonic() + wait_s
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)


JOURNAL_FILE = "journal.json"


def restore_journal(directory: str) -> list[str]:
    """Put back what the journal in `directory` says was replaced, newest first, then
    remove the journal; the paths restored. Each entry: `target` (a path relative to the
    journal's parent, the checkout), `backup` (a file in the journal holding the original,
    or null: the target was new), `created` (directories made for it, to remove if empty).
    The checkout is where the PR's code ran: a target is written only as a regular file
    inside it, never through a link."""
    root = os.path.realpath(os.path.dirname(os.path.abspath(directory)))
    try:
        with open(os.path.join(directory, JOURNAL_FILE), encoding="utf-8") as handle:
            entries = json.load(handle)
    except (OSError, ValueError):
        entries = []
    restored = []
    for entry in reversed(entries if isinstance(entries, list) else []):
        target = _inside(root, entry.get("target") if isinstance(entry, dict) else None)
        if target is None:
            continue
        backup = entry.get("backup")
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
        if isinstance(backup, str) and "/" not in backup:
            shutil.copyfile(os.path.join(directory, backup), target)
        for created in reversed(entry.get("created") or []):
            made = _inside(root, created)
            if made is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(made)
        restored.append(entry["target"])
    shutil.rmtree(directory, ignore_errors=True)
    return restored


def _inside(root: str, relative: object) -> str | None:
    """`root/relative` when it is a plain relative path that stays in `root`."""
    if not isinstance(relative, str) or os.path.isabs(relative) or ".." in relative.split("/"):
        return None
    path = os.path.join(root, relative)
    parent = os.path.realpath(os.path.dirname(path))
    return path if parent == root or parent.startswith(root + os.sep) else None


def main(argv: list[str]) -> int:
    pgid, log = int(argv[0]), argv[1]
    waits = [float(value) for value in argv[2:5]]
    for signum in (signal.SIGINT, signal.SIGHUP):  # only the pipe tells us to act
        signal.signal(signum, signal.SIG_IGN)
    told = b""
    while chunk := os.read(0, 4096):  # what the run tells; then end-of-file: it is gone
        told += chunk
    said = [line.partition(" ") for line in told.decode("utf-8", "replace").splitlines()]
    groups = [pgid] if pgid > 0 else []
    groups += [int(value) for kind, _, value in said if kind == "group" and value.isdigit()]
    for group in groups:
        stop(group, log, waits)
    for marker in (value for kind, _, value in said if kind == "sweep"):
        sweep(marker, log, waits)
    for journal in (value for kind, _, value in said if kind == "journal"):
        if os.path.isdir(journal):
            note(log, f"the run is gone; putting back the base files: {restore_journal(journal)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

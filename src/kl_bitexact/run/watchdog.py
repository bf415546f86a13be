"""Stops a launched server's process group when the run that launched it is gone.

`run` holds the write end of a pipe whose read end is this process's stdin. However the
run ends - normally, by an exception, or by SIGKILL, which runs no cleanup at all - the
kernel closes that write end, and the read here returns end-of-file. If the server's
group is still alive then, the run could not stop it: this process walks the same
ladder (interrupt, terminate, kill) and notes it in the server's log.

Run as a script (`python watchdog.py PGID LOG INTERRUPT_S TERMINATE_S KILL_S`) in a
session of its own, so that a terminal's signals aimed at the run do not reach it. It
imports only the standard library: it must start fast and cannot fail on the package.
"""

from __future__ import annotations

import os
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


def main(argv: list[str]) -> int:
    pgid, log = int(argv[0]), argv[1]
    waits = [float(value) for value in argv[2:5]]
    for signum in (signal.SIGINT, signal.SIGHUP):  # only the pipe tells us to act
        signal.signal(signum, signal.SIG_IGN)
    while os.read(0, 4096):  # nothing is ever written: this waits for end-of-file
        pass
    stop(pgid, log, waits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

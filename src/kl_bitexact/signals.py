"""Stop signals as one exception: SIGINT, SIGTERM and SIGHUP all raise `Interrupted`.

Python turns only SIGINT into an exception; SIGTERM (a CI runner cancelling the job) and
SIGHUP (the terminal closing) would end the process at once, skipping every `finally`, so
a launched server would outlive the run and nothing would be written. With these
handlers all three unwind the same way, through the same cleanup, to exit 128 + N.

The first signal raises; later ones only say that the shutdown is under way, so a
second Ctrl-C or a CI runner's repeated SIGTERM cannot cut the teardown ladder short
(the run's watchdog still stops the servers if the run is then SIGKILLed).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from kl_bitexact.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Handler:
    def __init__(self) -> None:
        self.stopping: signal.Signals | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        received = signal.Signals(signum)
        if self.stopping is not None:
            print(
                f"kl-bitexact: {received.name} received; already stopping "
                f"({self.stopping.name}): the servers are being shut down",
                file=sys.stderr,
                flush=True,
            )
            return
        self.stopping = received
        raise Interrupted(signum, received.name)


@contextmanager
def routed() -> Iterator[None]:
    """Route the stop signals to `Interrupted` inside the block, as before after it.

    A signal the parent set to be ignored stays ignored: a background job (`cmd &` in a
    script) ignores SIGINT on purpose, so that Ctrl-C in the terminal spares it, and
    `nohup` ignores SIGHUP. Outside the main thread (where Python refuses handlers,
    e.g. the CLI called from a worker thread) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, before in previous.items():
        if before is not signal.SIG_IGN:
            signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, before in previous.items():
            # None: a handler not set from Python; the default is the closest we can restore.
            signal.signal(signum, signal.SIG_DFL if before is None else before)

"""SIGINT and SIGTERM alike: both stop a command as an exception that its clean-up sees, and a second signal does
not cut that clean-up short.

``linattn train`` and ``linattn sweep`` run inside :func:`signals_interrupt`: Ctrl-C and ``kill -TERM`` both raise
:class:`Interrupted` (a ``KeyboardInterrupt``, so every handler written for Ctrl-C treats SIGTERM the same), the
command removes what it had not finished, says in one line what was kept, and exits with 128 + the signal's number
(130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# the fault tests' hook: with LINATTN_TEST_SIGNAL_AT=k a command sends itself LINATTN_TEST_SIGNAL (a number;
# default SIGTERM) at the training loop's first snapshot, taken every k steps (fault_hook)
ENV_SIGNAL_AT, ENV_SIGNAL = "LINATTN_TEST_SIGNAL_AT", "LINATTN_TEST_SIGNAL"


class Interrupted(KeyboardInterrupt):
    """The command was stopped by ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


def as_interrupted(error: KeyboardInterrupt) -> Interrupted:
    """``error`` as an :class:`Interrupted` (a plain KeyboardInterrupt, raised before the handlers were in place or
    by code that raises it itself, counts as SIGINT)."""
    return error if isinstance(error, Interrupted) else Interrupted(signal.SIGINT)


@contextlib.contextmanager
def signals_interrupt():
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread; after the first, further
    ones are ignored until the block is left, so the clean-up that the first one started runs to its end. The
    previous handlers are restored on exit; a signal that was ignored (``nohup``, a script's background job) stays
    ignored. Outside the main thread (where Python cannot set handlers) it changes
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            raise Interrupted(signum)

    # a signal ignored when the command started (nohup, a background job of a script) stays ignored
    previous = {s: signal.signal(s, handler) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT and SIGTERM back during the block (a rename that must not be cut in two) and deliver them after
    it. Where the system cannot block signals, nothing changes."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def fault_hook() -> tuple[int, object]:
    """``(snapshot_every, snapshot)`` for :func:`linattn.run` that send this process a signal at the training
    loop's first snapshot, when the environment asks for it (:data:`ENV_SIGNAL_AT`); else ``(0, None)``, a run
    without snapshots."""
    at = os.environ.get(ENV_SIGNAL_AT)
    if not at:
        return 0, None
    signum = int(os.environ.get(ENV_SIGNAL, signal.SIGTERM))

    def snapshot(model):
        os.kill(os.getpid(), signum)

    return int(at), snapshot

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
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# the fault tests' hook: with LINATTN_TEST_SIGNAL_AT=k a command sends itself LINATTN_TEST_SIGNAL (a number;
# default SIGTERM) at the training loop's first snapshot, taken every k steps (fault_hook)
ENV_SIGNAL_AT, ENV_SIGNAL = "LINATTN_TEST_SIGNAL_AT", "LINATTN_TEST_SIGNAL"
# seconds a signal waits for the main thread to take it before the watchdog ends the command (signals_interrupt)
GRACE_S = 5.0


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


class _State:
    """What the handler of :func:`signals_interrupt` knows: whether it has raised already, how deep inside
    :func:`signals_deferred` the main thread is, and the signal held back there."""

    raised = False
    deferring = 0
    pending: int | None = None


def _handler(signum, frame):
    if _State.raised:
        return  # the first signal's clean-up is running: let it finish
    if _State.deferring:
        _State.pending = signum
        return
    _State.raised = True
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt(stuck: Callable[[int], None] | None = None, grace: float | None = None):
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread; after the first, further
    ones are ignored until the block is left, so the clean-up that the first one started runs to its end. The
    previous handlers are restored on exit; a signal that was ignored (``nohup``, a script's background job) stays
    ignored. Outside the main thread (where Python cannot set handlers) it changes nothing.

    ``stuck(signum)``: what to remove when the main thread cannot take the signal. Python runs a handler between
    two bytecodes only, so one long operation in C (a step's einsum over many heads) would hold the signal for as
    long as it takes. With ``stuck`` given, a watchdog thread hears every signal at once (``signal.set_wakeup_fd``);
    if the handler has not run ``grace`` seconds later (None: :data:`GRACE_S`), it calls ``stuck(signum)`` (the
    command's clean-up and its one line) and ends the process with 128 + the signal's number."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.raised, _State.deferring, _State.pending = False, 0, None
    # a signal ignored when the command started (nohup, a background job of a script) stays ignored
    previous = {s: signal.signal(s, _handler) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    watchdog = _Watchdog(stuck, GRACE_S if grace is None else grace) if stuck is not None and previous else None
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.close()
        for s, h in previous.items():
            signal.signal(s, h)


class _Watchdog:
    """The thread of :func:`signals_interrupt` that ends the command when a signal is not taken in time."""

    def __init__(self, stuck: Callable[[int], None], grace: float):
        self.stuck, self.grace, self.done = stuck, grace, threading.Event()
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)
        self.previous_fd = signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._watch, name="linattn-signal-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while (byte := os.read(self.read, 1)) and not self.done.is_set():
            if byte[0] not in SIGNALS:
                continue
            if self.done.wait(self.grace) or _State.raised or _State.pending is not None:
                return  # the main thread took it (or the block is over): its own clean-up runs
            try:
                self.stuck(byte[0])
            finally:
                os._exit(128 + byte[0])

    def close(self) -> None:
        self.done.set()
        signal.set_wakeup_fd(self.previous_fd)
        os.close(self.write)  # the thread's read returns empty
        self.thread.join(1.0)
        os.close(self.read)


@contextlib.contextmanager
def signals_deferred():
    """Within :func:`signals_interrupt`, hold SIGINT and SIGTERM back during the block (a rename that must not be
    cut in two, a clean-up) and raise the :class:`Interrupted` of one that came once the block is done. (A signal
    mask would not do: a signal sent to the process reaches whichever thread does not block it, torch's among
    them, and Python runs the handler in the main thread all the same.)"""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
    if not _State.deferring and _State.pending is not None and not _State.raised:
        signum, _State.pending = _State.pending, None
        _State.raised = True
        raise Interrupted(signum)


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

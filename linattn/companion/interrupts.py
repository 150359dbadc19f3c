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
def signals_interrupt():
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread; after the first, further
    ones are ignored until the block is left, so the clean-up that the first one started runs to its end. The
    previous handlers are restored on exit; a signal that was ignored (``nohup``, a script's background job) stays
    ignored. Outside the main thread (where Python cannot set handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.raised, _State.deferring, _State.pending = False, 0, None
    # a signal ignored when the command started (nohup, a background job of a script) stays ignored
    previous = {s: signal.signal(s, _handler) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


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

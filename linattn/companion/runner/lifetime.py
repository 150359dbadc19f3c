"""Child processes that end with the command that started them, even when it is killed outright (Linux only).

A ``linattn figures`` or ``linattn sweep`` starts processes of its own: the runner's pool workers, each worker's
Jupyter kernel, the workers of a Dask ``LocalCluster``. When the command is killed with SIGKILL it has no chance to
stop them, and without help they go on (writing a figure into the book, waiting on a pipe for ever). The help is
Linux's parent-death signal: :func:`die_with_parent`, called in the child, asks the kernel to send the child SIGTERM
when its parent goes. Each link of the chain calls it (pool worker → kernel → cluster worker), so killing the command
ends the whole tree, one generation after another.

Linux only: elsewhere :func:`die_with_parent` does nothing and returns False (the processes then end as before, when
their pipes close, or not at all). Two properties of the signal to keep in mind:

* the "parent" is the *thread* that started the child: a child started from a short-lived thread gets the signal
  when that thread ends. Start children that call this from a thread that lives as long as they should (the main
  thread, an event loop's thread).
* the setting survives ``exec`` (a kernel started through ``subprocess`` keeps it) but not ``fork``: every
  generation calls it again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2  # <linux/prctl.h>


def supported() -> bool:
    """Whether this system has the parent-death signal (Linux)."""
    return sys.platform.startswith("linux")


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def parent_death_signal() -> int:
    """The signal this process (its calling thread) receives when its parent ends; 0 for none, or where the system
    has no parent-death signal."""
    if not supported():
        return 0
    value = ctypes.c_int()
    _libc().prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0)
    return value.value


def die_with_parent(parent: int | None = None, sig: int = signal.SIGTERM) -> bool:
    """Have this process receive ``sig`` (default SIGTERM) when its parent ends: ``prctl(PR_SET_PDEATHSIG, sig)``.

    Call it in the child, early (a pool worker's initializer, a kernel's start, a Dask worker's setup). ``parent``:
    the process id of the parent as the parent knew it when it started the child (``os.getpid()`` there, passed
    down); if the parent is already gone by the time the signal is set (it died in between, and this process was
    handed to another), this process exits at once with status 143 (as SIGTERM would have ended it). Without
    ``parent`` that check can only notice a hand-over to init (process 1).

    Returns True when the signal is set, False where the system has none (not Linux). An OSError from ``prctl``
    (not expected: the arguments are valid) is raised.
    """
    if not supported():
        return False
    if _libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    now = os.getppid()
    if (parent is not None and now != parent) or now == 1:
        os._exit(128 + int(sig))  # the parent died before the signal was set: it will never come
    return True


def kernel_arguments(parent: int | None = None) -> list[str]:
    """Command-line arguments for an IPython kernel that make it call :func:`die_with_parent` as it starts (its
    ``exec_lines``, run before any cell; the expression leaves no name in the notebook's namespace).

    ``parent``: the process that starts the kernel (default: this one, ``os.getpid()``). For papermill, which hands
    them to nbclient and jupyter_client: ``papermill.execute_notebook(..., extra_arguments=kernel_arguments())``.
    Empty where the system has no parent-death signal.
    """
    if not supported():
        return []
    parent = os.getpid() if parent is None else int(parent)
    line = f"__import__('linattn.companion.runner.lifetime', fromlist=['_']).die_with_parent({parent})"
    return [f"--IPKernelApp.exec_lines={line}"]


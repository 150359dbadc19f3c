"""The Dask worker plugin that ties a local cluster's workers to the process that made the cluster
(:func:`linattn.companion.runner.lifetime.die_with_parent`); a module of its own because it imports Dask."""

from __future__ import annotations

import signal
import threading

from distributed.diagnostics.plugin import WorkerPlugin

from ..runner.lifetime import die_with_parent


class DieWithParent(WorkerPlugin):
    """Call :func:`~linattn.companion.runner.lifetime.die_with_parent` in every worker as it starts (restarted ones
    too): a local cluster's workers are children of the process that made it, ``parent``, and end with it even when it
    is killed outright (Linux; elsewhere nothing changes); and ignore SIGINT, which the command handles."""

    name = "linattn-die-with-parent"

    def __init__(self, parent: int):
        self.parent = int(parent)

    def setup(self, worker):
        die_with_parent(self.parent)
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C reaches the whole process group: the command that made the cluster stops it, and the workers
            # would only print a traceback each
            signal.signal(signal.SIGINT, signal.SIG_IGN)

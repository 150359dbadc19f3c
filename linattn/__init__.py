"""linattn: a reproducible companion to *Training Dynamics of In-Context Learning in Linear Attention*
(Zhang, Singh, Latham, Saxe; ICML 2025, arXiv:2501.16265).

Modules, read in this order: ``data`` (the task), ``models`` (ATTN_M, ATTN_S, MLP), ``engines`` (the loss, three
ways), ``train`` (gradient descent), ``config`` and ``run`` (one run from settings), ``cli`` (the ``linattn`` command).

The library in one example (the API page of the book lists every name)::

    import linattn
    cfg = linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=4, epoch=500, lr=0.05, init=0.3)
    datasets, init = linattn.draw(cfg)          # or your own: linattn.Sequences(X, y) and an init.npz-style dict
    res = linattn.run(cfg, init=init, data=datasets.train)
    res.history.train_loss, res.weights         # the losses, and the final weights in the layout of init.npz
    model = linattn.build_model("attnS", res.weights)

Note that ``linattn.run`` is the function; the module is ``linattn.run`` only through ``from linattn.run import …``.
"""

__version__ = "0.1.0"

from . import diagnostics, events, theory  # noqa: E402
from .config import ConfigError, RunConfig  # noqa: E402
from .data import Datasets, Sequences  # noqa: E402
from .models import build_model, init_weights  # noqa: E402
from .run import RunResult, SavedRun, draw, load_run, run  # noqa: E402
from .train import TrainingDiverged  # noqa: E402

__all__ = ["RunConfig", "ConfigError", "run", "RunResult", "load_run", "SavedRun", "draw", "build_model",
           "init_weights", "Sequences", "Datasets", "TrainingDiverged", "theory", "diagnostics", "events", "__version__"]

"""linattn: a reproducible companion to *Training Dynamics of In-Context Learning in Linear Attention*
(Zhang, Singh, Latham, Saxe; ICML 2025, arXiv:2501.16265).

The house (imports run downwards only; ``ARCHITECTURE.md`` has the full plan)::

    linattn.cli            the `linattn` command: train, sweep, figures, notebook
    linattn.companion      the book: figure runner, presets, run store, published readings, plotting, book builder
    ─────────────────────  the science core, which never imports the companion ─────────────────────────────────
    training               one run from a RunConfig (config): plan (check and draw), experiment (train it),
                           result (the record, written and read back), keys (its address), batch (many runs),
                           train, flow (gradient descent, gradient flow), memory
    objectives             the losses behind one registry: exact, population, softmax, autograd
    models                 ATTN_M, ATTN_S (rank R), the MLP on the cubic feature; softmax variants
    data, reference_draws  the in-context regression task; the authors' own random draws
    errors                 ConfigError and the checks of one setting
    normalization          sum vs mean, sequence prefixes
    theory                 the paper's predictions
    analysis               the readings of a run: loss_curves, diagnostics (what a trained model shows), events
                           (who learns what, when); given as linattn.loss_curves, linattn.diagnostics, linattn.events

The library in one example (the API page of the book lists every name)::

    import linattn
    cfg = linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=4, epoch=500, lr=0.05, init=0.3)
    datasets, init = linattn.draw(cfg)          # or your own: linattn.Sequences(X, y) and an init.npz-style dict
    res = linattn.run(cfg, init=init, data=datasets.train)
    res.history.train_loss, res.weights         # the losses, and the final weights in the layout of init.npz
    model = linattn.build_model("attnS", res.weights)
"""

import importlib

from . import _lazy
from ._version import __version__
from .config import RunConfig
from .data import Datasets, Sequences, sample_tasks
from .errors import ConfigError
from .training.batch import run_many
from .weights import init_weights, mlp_from_attn_m

#: The names given on first use (PEP 562 module ``__getattr__``), each → the module it comes from: importing linattn
#: (and checking a RunConfig) imports no torch, scipy or matplotlib; a run, a model or a draw imports torch then.
_LAZY = {"run": "training.experiment", "RunResult": "training.result", "load_run": "training.result",
         "write_outputs": "training.result", "draw": "training.plan", "build_model": "models",
         "TrainingDiverged": "training.train"}
#: The modules given as names of the package (``linattn.loss_curves``), each → where it lives.
_SUBMODULES = {"theory": "theory", "loss_curves": "analysis.loss_curves", "diagnostics": "analysis.diagnostics",
               "events": "analysis.events", "objectives": "objectives"}

__all__ = ["RunConfig", "ConfigError", "run", "run_many", "RunResult", "load_run", "write_outputs", "draw",
           "build_model", "init_weights", "mlp_from_attn_m", "Sequences", "Datasets", "sample_tasks",
           "TrainingDiverged", "theory", "loss_curves", "diagnostics", "events", "objectives", "__version__"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{_SUBMODULES[name]}")
    return _lazy.attribute(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""linattn: a reproducible companion to *Training Dynamics of In-Context Learning in Linear Attention*
(Zhang, Singh, Latham, Saxe; ICML 2025, arXiv:2501.16265).

The house (imports run downwards only; ``ARCHITECTURE.md`` has the full plan)::

    linattn.cli            the `linattn` command: train, figures, notebook
    linattn.companion      the book: figure runner, presets, run store, published readings, plotting, book builder
    ─────────────────────  the science core, which never imports the companion ─────────────────────────────────
    experiment             one run from a RunConfig (config): draw, train, write, load
    train, flow            gradient descent, gradient flow
    objectives             the losses behind one registry: exact, population, softmax, autograd
    models                 ATTN_M, ATTN_S (rank R), the MLP on the cubic feature; softmax variants
    data, reference_draws  the in-context regression task; the authors' own random draws
    normalization          sum vs mean, sequence prefixes
    theory, diagnostics, events   the paper's predictions; what a trained model shows; who learns what, when

The library in one example (the API page of the book lists every name)::

    import linattn
    cfg = linattn.RunConfig(model="attnS", head_num=3, rank=1, in_dim=4, epoch=500, lr=0.05, init=0.3)
    datasets, init = linattn.draw(cfg)          # or your own: linattn.Sequences(X, y) and an init.npz-style dict
    res = linattn.run(cfg, init=init, data=datasets.train)
    res.history.train_loss, res.weights         # the losses, and the final weights in the layout of init.npz
    model = linattn.build_model("attnS", res.weights)
"""

from . import diagnostics, events, objectives, theory
from ._version import __version__
from .batch import run_many
from .config import ConfigError, RunConfig
from .data import Datasets, Sequences, sample_tasks
from .experiment import RunResult, draw, load_run, run, write_outputs
from .models import build_model, init_weights, mlp_from_attn_m
from .train import TrainingDiverged

__all__ = ["RunConfig", "ConfigError", "run", "run_many", "RunResult", "load_run", "write_outputs", "draw",
           "build_model", "init_weights", "mlp_from_attn_m", "Sequences", "Datasets", "sample_tasks",
           "TrainingDiverged", "theory", "diagnostics", "events", "objectives", "__version__"]

"""What the pages built on Figure 3a's runs share: the seed-0 run (trained once, through the run store, for Figures
3a, 3b, 3c and the diagnostics and PCR pages) and the words that say which settings a run had.

The five presets give the seed-0 run the same settings and snapshot interval
(:data:`.presets.SEED0_RUN`), so :func:`seed_run` of any of them, and Figure 3a's seed 0, are one entry of the
run store: the first page to ask trains it, the others read it.
"""

from __future__ import annotations

import numpy as np

from ....config import RunConfig
from ...output import words
from .trainer import trained


def seed_run(runs: dict, S: dict):
    """The one run a page declares (``runs``: its ``runs(S)``), from the run store, with its weight snapshots every
    ``S["snapshot_every"]`` steps."""
    run, = trained(runs, S)
    return run


def describe(cfg: RunConfig | dict, *, seeds=None, snapshot_every: int | None = None) -> str:
    """A run's settings in words, for a page's prose: ``"ATTN_S of rank 1, H = 5 heads, D = 4, N + 1 = 32 tokens,
    P = 80000 training sequences, initialisation 0.01 (dec2024 scheme), learning rate 0.02, 10001 steps, the
    authors' random draws, seed 0"``. ``seeds`` replaces the seed by the list of them; ``snapshot_every`` adds the
    interval at which the weights were recorded."""
    c = cfg if isinstance(cfg, dict) else cfg.to_dict()
    model = {"attnS": f"ATTN_S of rank {c.get('rank', 1)}", "attnM": "ATTN_M",
             "mlp": "the MLP on the cubic feature"}.get(c["model"], c["model"])
    P = c.get("trainset_size")
    parts = [model, f"H = {c['head_num']} heads", f"D = {c['in_dim']}", f"N + 1 = {c['seq_len']} tokens",
             "the population loss (P = ∞)" if P is None else f"P = {P} training sequences",
             f"initialisation {c['init']:g} ({c['init_scheme']} scheme)", f"learning rate {c['lr']:g}",
             f"{c['epoch']} steps",
             "the authors' random draws" if c.get("draws", "reference") == "reference" else "linattn's own random "
                                                                                            "streams"]
    if c.get("dtype", "float64") != "float64":
        parts.append(c["dtype"])
    if c.get("spectrum") is not None:
        parts.append("eigenvalues " + words(np.round(np.asarray(c["spectrum"], dtype=float), 4)))
    parts.append(f"seeds {words(seeds)}" if seeds is not None and len(seeds) > 1
                 else f"seed {seeds[0] if seeds is not None else c['seed']}")
    if snapshot_every:
        parts.append(f"weights recorded every {snapshot_every} steps")
    return ", ".join(parts)


def join(items, last: str = "and") -> str:
    """``["e₁", "e₂", "e₃"]`` → ``"e₁, e₂ and e₃"`` (text items; :func:`linattn.companion.output.words` for
    numbers); ``"–"`` when empty."""
    items = [str(i) for i in items]
    if not items:
        return "–"
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def which_run(published: bool) -> dict[str, str]:
    """What a page on the seed-0 run calls it, by whether its settings are the paper preset's
    (``presets.is_published``): ``run`` ("the seed-0 ATTN_S run of Figure 3a", or "an ATTN_S run at settings of our
    own" for a re-run at other knobs, which is not Figure 3a's run) and ``origin``, the clause on where it comes
    from."""
    if published:
        return dict(run="the seed-0 ATTN_S run of Figure 3a",
                    origin="it is the seed-0 run of Figure 3a, trained once and read back from the run store")
    return dict(run="an ATTN_S run at settings of our own, not Figure 3a's",
                origin="a run at settings of our own (Figure 3a's seed-0 run is the paper preset's), trained once "
                       "and read back from the run store")

"""The two normalisations of a linear-attention output, and the sequence prefixes the loss averages over.

``normalize="sum"`` is the reference implementation's: a head sums over the tokens, ŷ = Σ_m s_m u_m. ``"mean"`` is the
paper's (Section 2): the same sum times 1/N, N = n − 1 context pairs. For the same weights the reference's output is N
times the paper's; everything in linattn that depends on the choice takes ``normalize`` and asks this module.

``vary_len`` (the reference's ``--vary_len``) averages the loss over the prefixes n = 2 … seq_len of every sequence,
the n-th token of a prefix becoming its query (label zeroed and kept as the target); the reference then divides a
prefix's output by n. :func:`cut_prefix` is the one place that cuts a prefix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

NORMALIZATIONS = ("sum", "mean")

# ŷ is homogeneous in the weights of this degree: two weight factors for ATTN_M and the MLP, three for ATTN_S.
N_FACTORS = {"attnM": 2, "mlp": 2, "attnS": 3}


def check(normalize: str) -> str:
    """``normalize`` if it is one of ``NORMALIZATIONS``, else ValueError naming the field."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {', '.join(map(repr, NORMALIZATIONS))}, got {normalize!r}")
    return normalize


def token_scale(n_tokens: int, normalize: str, vary_len: bool = False) -> float:
    """The factor in front of the sum over the ``n_tokens`` tokens of one sequence (or prefix).

    ``"sum"``: 1, or 1/n under ``vary_len`` (the reference divides by the prefix length); ``"mean"``: 1/N,
    N = n − 1 context pairs.
    """
    if check(normalize) == "mean":
        return 1.0 / (n_tokens - 1)
    return 1.0 / n_tokens if vary_len else 1.0


def feature_scale(N: int, *, normalize: str) -> float:
    """How much larger a ``normalize``-normalised feature (β, z, a model's A) is than the paper's: 1 for "mean",
    N for "sum" (b = Σ_n y_n x_n = N β)."""
    return float(N) if check(normalize) == "sum" else 1.0


def _n_factors(model: str) -> int:
    """The degree k of ŷ in the weights of ``model`` (2 for ATTN_M and the MLP, 3 for ATTN_S)."""
    try:
        return N_FACTORS[model]
    except KeyError:
        raise ValueError(f"model must be one of {', '.join(map(repr, N_FACTORS))}, got {model!r}") from None


def weight_scale_to_paper(model: str, N: int, *, normalize: str) -> float:
    """The factor turning a weight of a ``normalize``-normalised run into the paper-normalised weight of the same
    trajectory: 1 for "mean", N^{1/k} for "sum" (k: the degree of ŷ in the weights, 2 for ATTN_M and the MLP,
    3 for ATTN_S)."""
    return feature_scale(N, normalize=normalize) ** (1.0 / _n_factors(model))


def to_paper_normalisation(model: str, N: int, *, lr: float, init: float) -> tuple[float, float]:
    """(lr, init) of the paper-normalised run that follows a reference-normalised one.

    The reference's ŷ is N times the paper's for the same weights and ŷ has degree k in them, so weights larger by
    N^{1/k} give the paper's model the reference's output, and gradient descent on them needs a rate larger by
    N^{2/k}: ATTN_M and the MLP lr·N, init·√N; ATTN_S lr·N^{2/3}, init·N^{1/3}. The trajectories then agree step by
    step (``tests/test_theory.py`` trains both ways).
    """
    k = _n_factors(model)
    return lr * N ** (2.0 / k), init * N ** (1.0 / k)


def to_reference_normalisation(model: str, N: int, *, lr: float, init: float) -> tuple[float, float]:
    """The inverse of :func:`to_paper_normalisation`."""
    k = _n_factors(model)
    return lr / N ** (2.0 / k), init / N ** (1.0 / k)


def lengths(n_tokens: int, vary_len: bool) -> range:
    """The sequence lengths that enter the loss: every prefix n = 2 … seq_len under ``vary_len``, else seq_len."""
    return range(2, n_tokens + 1) if vary_len else range(n_tokens, n_tokens + 1)


def cut_prefix(X: Any, y: Any, n: int) -> tuple[Any, Any]:
    """(X_n, y_n): the sequences ``X`` (numpy or torch, (P, seq_len, D+1)) cut to their first ``n`` tokens, the n-th
    becoming the query: its label is zeroed in X_n and kept as the target y_n. ``n = seq_len`` returns ``X, y``."""
    if n == X.shape[1]:
        return X, y
    Xn: Any = X[:, :n].clone() if hasattr(X, "clone") else np.array(X[:, :n])
    yn = Xn[:, -1, -1].clone() if hasattr(Xn, "clone") else Xn[:, -1, -1].copy()
    Xn[:, -1, -1] = 0.0
    return Xn, yn


def prefix_terms(X: Any, y: Any, *, vary_len: bool, normalize: str) -> Iterator[tuple[Any, Any, float]]:
    """(X_n, y_n, scale) for each term of the loss on a batch of sequences: the whole sequences, or every prefix
    n = 2 … seq_len under ``vary_len`` (:func:`cut_prefix`), with the prefix's :func:`token_scale`."""
    n_tok = X.shape[1]
    for n in lengths(n_tok, vary_len):
        Xn, yn = cut_prefix(X, y, n)
        yield Xn, yn, token_scale(n, normalize, vary_len)


def prefix_queries(X: Any, y: Any, terms: Sequence[int]) -> tuple[Any, Any]:
    """The queries and targets of the prefixes of length ``terms`` at once (torch, X (P, seq_len, D+1)), for engines
    that keep the context tokens whole: (queries (P, len(terms), D+1), targets (P, len(terms))). The rule is
    :func:`cut_prefix`'s: prefix n's query is token n with its label zeroed, the label its target (the whole
    sequence's target is ``y``)."""
    queries = X[:, [n - 1 for n in terms]].clone()
    targets = queries[..., -1].clone()
    if terms[-1] == X.shape[1]:
        targets[:, -1] = y
    queries[..., -1] = 0.0
    return queries, targets

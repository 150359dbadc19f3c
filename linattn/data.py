"""In-context linear regression data, generated the way the reference implementation does.

A sequence holds ``seq_len`` tokens x̃_n = (x_n, y_n) ∈ R^{D+1} with x_n ~ N(0, Λ) and y_n = wᵀx_n; the last token
is the query, whose label is zeroed before it enters a model and kept apart as the target y. So N = seq_len − 1
context pairs precede the query (paper, Section 2).

The reference implementation's recipe, drawn here from linattn's own independent streams (``--draws streams``;
``reference_draws.py`` draws the authors' exact numbers instead):

* Λ: eigenvalues 1..D rotated by a random orthogonal matrix and divided by the trace (default); I/D (``white``);
  or a given spectrum (rotated the same way) or SPD matrix, used as given.
* x is centred across the P sequences, per position and coordinate.
* icl = 1: task vectors w ~ N(0, I_D), whitened across the set (sample mean 0, sample covariance I).
* 0 < icl < 1: the first ⌊icl·P⌋ sequences get random w, the rest share ``w_fix`` (norm √D).
* icl = 0: context labels are N(0, 1) noise; only the query target is w_fixᵀx_q.
* test sets: in-weight (the icl = 0 recipe) and in-context (the icl = 1 recipe), each of ``testset_size``.

All randomness flows from one seed through :class:`numpy.random.SeedSequence` children, one per purpose, so the
training set does not change when test sets are added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .errors import ConfigError, check_int, is_number, named

# Child streams of the seed, one per purpose (init weights use INIT, see models.init_weights).
COV, W_FIX, TRAIN, TEST_IWL, TEST_ICL, INIT, POPULATION = range(7)


def streams(seed: int, which: int) -> np.random.Generator:
    """The generator for one purpose (``COV``, ``TRAIN``, …) derived from ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(POPULATION + 1)[which])


@dataclass
class Sequences:
    """A set of P sequences: ``X`` (P, seq_len, D+1) with the query label zeroed, and the targets ``y`` (P,).

    Token m of sequence p is ``X[p, m] = (x_m, y_m)``; the last token is the query, whose label slot
    ``X[p, -1, -1]`` must be 0 (its true label is ``y[p]``). Checked on construction, each failure a ValueError:
    the shapes (at least one sequence, two tokens and one input coordinate), finite values, and the zeroed query
    label (a nonzero one would hand the target to the model). Arrays (or CPU tensors) are kept as numpy arrays
    without copying; integer or boolean arrays become float64.
    """

    X: np.ndarray
    y: np.ndarray

    def __post_init__(self):
        X, y = np.asarray(self.X), np.asarray(self.y)
        if X.ndim != 3 or X.shape[0] < 1 or X.shape[1] < 2 or X.shape[2] < 2:
            raise ValueError(f"X must have shape (P, seq_len, D+1) with P >= 1 sequences, seq_len >= 2 tokens (context "
                             f"and query) and D >= 1 input coordinates, got shape {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape (P,) = ({X.shape[0]},), one target per sequence of X, got shape "
                             f"{y.shape}")
        X = X if np.issubdtype(X.dtype, np.floating) else X.astype(np.float64)
        y = y if np.issubdtype(y.dtype, np.floating) else y.astype(np.float64)
        for name, a in (("X", X), ("y", y)):
            bad = a.size - np.count_nonzero(np.isfinite(a))
            if bad:
                raise ValueError(f"{name} must be finite, but {bad} of its {a.size} entries are NaN or infinite")
        leak = np.count_nonzero(X[:, -1, -1])
        if leak:
            raise ValueError(f"the query's label X[:, -1, -1] must be 0, but it is nonzero in {leak} of {X.shape[0]} "
                             "sequences: the model would see the target. Zero it and pass the label as y")
        self.X, self.y = X, y

    def __len__(self) -> int:
        return self.X.shape[0]


@dataclass
class Datasets:
    """The training set, the optional test sets, and the task (Λ and the fixed task vector).

    ``train`` is None for population training; ``w_fix`` is None when the data were given rather than drawn.
    """

    train: Sequences | None
    test_iwl: Sequences | None
    test_icl: Sequences | None
    cov: np.ndarray
    w_fix: np.ndarray | None

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by the name ``data.npz`` gives it: ``cov``, ``w_fix``, the training set as ``X``, ``y`` and
        each test set as ``test_iwl_X``, ``test_iwl_y`` (…); what is None is left out."""
        out = {"cov": self.cov} if self.w_fix is None else {"cov": self.cov, "w_fix": self.w_fix}
        for key, prefix in _PREFIXES:
            s = getattr(self, key)
            if s is not None:
                out.update({f"{prefix}X": s.X, f"{prefix}y": s.y})
        return out

    @classmethod
    def from_arrays(cls, a: dict) -> "Datasets":
        """The inverse of :meth:`arrays`."""
        sets = {key: Sequences(a[f"{prefix}X"], a[f"{prefix}y"]) if f"{prefix}X" in a else None
                for key, prefix in _PREFIXES}
        return cls(cov=a["cov"], w_fix=a.get("w_fix"), **sets)


_PREFIXES = (("train", ""), ("test_iwl", "test_iwl_"), ("test_icl", "test_icl_"))


def _random_rotation(D: int, rng: np.random.Generator) -> np.ndarray:
    """An orthogonal D×D matrix: the Q factor of the QR decomposition of a Gaussian matrix."""
    q, r = np.linalg.qr(rng.standard_normal((D, D)))
    return q * np.sign(np.diag(r))


def _check_spd(cov: ArrayLike) -> np.ndarray:
    """Return ``cov`` as a float64 array, or raise ValueError if it is not symmetric positive definite."""
    try:
        cov = np.asarray(cov, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"covariance must be a square matrix of numbers, got {cov!r}") from None
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"covariance must be a square matrix, got shape {cov.shape}")
    if not np.isfinite(cov).all():
        raise ValueError("covariance must be finite (it has NaN or infinite entries)")
    if not np.allclose(cov, cov.T, atol=1e-12, rtol=1e-10):
        raise ValueError("covariance must be symmetric")
    if np.linalg.eigvalsh(cov).min() <= 0:
        raise ValueError("covariance must be positive definite (an eigenvalue is <= 0)")
    return cov


def check_spectrum(spectrum: ArrayLike, D: int) -> np.ndarray:
    """``spectrum`` as a float64 array of D positive eigenvalues, else ConfigError."""
    if isinstance(spectrum, (str, bytes)) or not all(is_number(v) for v in np.ravel(np.asarray(spectrum, object))):
        raise ConfigError(f"{named('spectrum')} must be a sequence of numbers, got {spectrum!r}", field="spectrum",
                          value=spectrum)
    eig = np.asarray(spectrum, dtype=np.float64)
    if eig.shape != (D,):
        raise ConfigError(f"{named('spectrum')} has {eig.size} values, expected {named('in_dim')} = {D}",
                          field="spectrum", value=spectrum)
    if not np.all(eig > 0):
        raise ConfigError(f"{named('spectrum')} values must be positive (the covariance must be positive definite)",
                          field="spectrum", value=spectrum)
    return eig


def check_covariance(matrix: ArrayLike, D: int) -> np.ndarray:
    """``matrix`` as a float64 D×D symmetric positive definite array, else ValueError."""
    cov = _check_spd(matrix)
    if cov.shape != (D, D):
        raise ValueError(f"covariance matrix has shape {cov.shape}, expected ({D}, {D})")
    return cov


def make_covariance(D: int, rng: np.random.Generator, *, white: bool = False, spectrum: ArrayLike | None = None,
                    matrix: ArrayLike | None = None) -> np.ndarray:
    """Input covariance Λ.

    Default: Q diag(1, …, D) Qᵀ / (D(D+1)/2) with Q a random rotation, so tr Λ = 1. ``white``: I / D.
    ``spectrum``: Q diag(spectrum) Qᵀ, not rescaled. ``matrix``: used as given after an SPD check.
    """
    if matrix is not None:
        return check_covariance(matrix, D)
    if white:
        return np.eye(D) / D
    if spectrum is None:
        eig = np.arange(1, D + 1, dtype=np.float64)
        eig /= eig.sum()
    else:
        eig = check_spectrum(spectrum, D)
    q = _random_rotation(D, rng)
    return _check_spd((q * eig) @ q.T)


def _fixed_task(D: int, rng: np.random.Generator) -> np.ndarray:
    """The shared task vector of in-weight sequences: N(0, I) rescaled to norm √D."""
    w = rng.standard_normal(D)
    return w * np.sqrt(D) / np.linalg.norm(w)


def _whiten(w: np.ndarray) -> np.ndarray:
    """Rows with exactly zero sample mean and identity sample covariance (1/P convention), by ZCA."""
    w = w - w.mean(axis=0)
    cov = w.T @ w / w.shape[0]
    evals, evecs = np.linalg.eigh(cov)
    return w @ (evecs / np.sqrt(evals)) @ evecs.T


def sample_sequences(P: int, seq_len: int, cov: np.ndarray, icl: float, w_fix: np.ndarray,
                     rng: np.random.Generator, *, centre: bool = True) -> Sequences:
    """P sequences of ``seq_len`` tokens by the reference's recipe (module docstring).

    ``centre=False`` skips the finite-set centring and whitening (used for population estimates).
    """
    D = cov.shape[0]
    evals, evecs = np.linalg.eigh(cov)
    x = rng.standard_normal((P, seq_len, D)) @ (evecs * np.sqrt(evals)).T
    if centre:
        x -= x.mean(axis=0)
    n_icl = int(np.floor(icl * P + 1e-9))
    w = np.empty((P, D))
    if n_icl:
        w_rand = rng.standard_normal((n_icl, D))
        w[:n_icl] = _whiten(w_rand) if (centre and n_icl == P and P > D) else w_rand
    w[n_icl:] = w_fix
    labels = np.einsum("pnd,pd->pn", x, w)
    if icl == 0:
        labels[:, :-1] = rng.standard_normal((P, seq_len - 1))
    X = np.concatenate([x, labels[..., None]], axis=-1)
    y = X[:, -1, D].copy()
    X[:, -1, D] = 0.0
    return Sequences(X=X, y=y)


def sample_tasks(cov: ArrayLike, P: int, seq_len: int, *, seed: int, icl: float = 1.0,
                 centre: bool = True) -> Sequences:
    """P sequences of ``seq_len`` tokens of the in-context regression task with the caller's own input covariance.

    x_n ~ N(0, Λ) with Λ = ``cov`` (D×D, symmetric positive definite: checked), y_n = wᵀx_n, the last token the
    query (label zeroed in ``X``, kept as the target ``y``): a :class:`Sequences` with X (P, seq_len, D+1), y (P,).
    ``icl`` is the fraction of sequences with a fresh task vector w ~ N(0, I_D) (the rest share one fixed w of norm
    √D; icl = 0: noise context labels), as for a run's training set. ``centre`` (default, the reference's recipe):
    centre the inputs across the P sequences and whiten the task vectors, exactly as a drawn training set; False:
    independent Gaussian draws. The numbers are those of ``seed``'s training stream: the same as the training set
    of ``RunConfig(draws="streams", cov_matrix=cov, trainset_size=P, seq_len=seq_len, icl=icl, seed=seed)``.

        seqs = linattn.sample_tasks(np.diag([0.5, 0.3, 0.2]), P=1000, seq_len=9, seed=0)
        seqs.X.shape, seqs.y.shape     # (1000, 9, 4), (1000,)

    Invalid arguments raise one ValueError naming the argument.
    """
    cov = _check_spd(cov)
    P = check_int("P", P)
    seq_len = check_int("seq_len", seq_len, low=2, what="an integer >= 2 (one context pair and the query)")
    seed = check_int("seed", seed, low=0, high=2**32, what="an integer in [0, 2^32)")
    if not is_number(icl) or not 0 <= icl <= 1:
        raise ValueError(f"icl must be a number in [0, 1], got {icl!r}")
    if centre and P == 1:
        raise ValueError("P=1 with centre=True would centre the single sequence's inputs to zero: use P >= 2 or "
                         "centre=False")
    w_fix = _fixed_task(cov.shape[0], streams(seed, W_FIX))
    return sample_sequences(P, seq_len, cov, float(icl), w_fix, streams(seed, TRAIN), centre=centre)


def make_datasets(*, in_dim: int, seq_len: int, trainset_size: int | None, testset_size: int = 0, icl: float = 1.0,
                  white_cov: bool = False, spectrum: ArrayLike | None = None, cov_matrix: ArrayLike | None = None,
                  seed: int = 10, shared: dict | None = None) -> Datasets:
    """Training set (None when ``trainset_size`` is None, i.e. population training), test sets and task.

    Each part has its own stream, so the test sets do not depend on the training set's size or in-context fraction:
    ``shared``, a dict, keeps them by what they do depend on, for the next call (runs of one seed that differ in P or
    c then hold the same test sets, drawn once)."""
    cov = make_covariance(in_dim, streams(seed, COV), white=white_cov, spectrum=spectrum, matrix=cov_matrix)
    w_fix = _fixed_task(in_dim, streams(seed, W_FIX))
    train = None
    if trainset_size is not None:
        train = sample_sequences(trainset_size, seq_len, cov, icl, w_fix, streams(seed, TRAIN))
    test_iwl = test_icl = None
    if testset_size:
        key = ("test sets", repr((in_dim, seq_len, testset_size, white_cov, spectrum, cov_matrix, seed)))
        tests = None if shared is None else shared.get(key)
        if tests is None:
            tests = (sample_sequences(testset_size, seq_len, cov, 0.0, w_fix, streams(seed, TEST_IWL)),
                     sample_sequences(testset_size, seq_len, cov, 1.0, w_fix, streams(seed, TEST_ICL)))
            if shared is not None:
                shared[key] = tests
        test_iwl, test_icl = tests
    return Datasets(train=train, test_iwl=test_iwl, test_icl=test_icl, cov=cov, w_fix=w_fix)

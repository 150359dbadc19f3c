"""The authors' random draws, number for number: ``--draws reference``.

For a given seed and flags this module produces the same covariance, training and test sets, fixed task vector and
initial weights as the authors' PyTorch code at each of its three initialisation eras, bit for bit in float32
(the ``tests/fixtures/reference_draws`` arrays were made by that code; ``tests/test_reference_draws.py`` checks
every one). The recipe, in the order the reference draws:

1. Two generators seeded with the same seed: a torch CPU generator (task vectors, noise labels, all weights) and
   numpy's legacy ``RandomState`` (the covariance rotation and the token inputs). Both are private objects here,
   so no global random state is read or changed.
2. torch: the fixed task vector w_fix ~ N(0, I_D) (jan2025/dec2025: rescaled to norm √D).
3. numpy: Λ = Q diag(1..D) Qᵀ / tr (Q from the QR of a D×D Gaussian matrix), or I/D with ``white_cov`` (no draw).
4. The training block, then (if ``testset_size`` > 0) the in-weight block and the in-context block. Each block:
   numpy's ``multivariate_normal(0, Λ)`` for n·N tokens, cast to float32, centred across sequences; then torch task
   vectors (n, D) (whitened for icl = 1; rows ⌊n·c⌋… replaced by w_fix for 0 < c < 1), or noise labels for icl = 0.
5. torch: the model. Each ``nn.Linear`` constructor consumes one uniform per weight entry before the
   initialisation overwrites it; the initialisation then draws normals in module order (see :func:`_init_weights`).

Two torch facts decide the bits: a ``normal_`` call on fewer than 16 numbers uses a scalar path that caches a spare
value in the generator, and one call of n numbers differs from several smaller calls. Hence every draw below is
one call with the reference's shape. Float32 arithmetic (means, covariance, eigh, products) is done with torch on
the CPU, as the reference does, except the whitening's square root, which the reference takes with numpy.

numpy's multivariate normal factors Λ by an SVD whose singular-vector signs depend on the LAPACK build, so on a
machine with another numpy/LAPACK the token inputs can differ from the fixtures (the tests compare that SVD first).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .data import Datasets, Sequences
from .weights import INIT_SCHEMES


class Draws:
    """The reference's two generators, seeded as its ``__main__`` seeds them."""

    def __init__(self, seed: int):
        self.torch = torch.Generator(device="cpu").manual_seed(seed)
        self.numpy = np.random.RandomState(seed)

    def normal(self, shape: tuple[int, ...], std: float = 1.0) -> torch.Tensor:
        """One float32 ``normal_(0, std)`` call on a fresh tensor of ``shape`` (the call's size matters)."""
        return torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=self.torch)

    def linear(self, numel: int) -> None:
        """What an ``nn.Linear`` constructor consumes: one uniform per weight entry (values then overwritten)."""
        torch.empty(numel, dtype=torch.float32).uniform_(generator=self.torch)

    def fork(self) -> "Draws":
        """Two generators in the state these are in now, drawing on independently of them (the numbers that
        follow the data sets, for each of several models drawn after the same data)."""
        twin = Draws(0)
        twin.torch.set_state(self.torch.get_state())
        twin.numpy.set_state(self.numpy.get_state())
        return twin


def _covariance(D: int, draws: Draws, *, white: bool) -> np.ndarray:
    """Λ: eigenvalues 1..D rotated by Q (QR of a Gaussian matrix), divided by the trace; or I/D (no draw)."""
    if white:
        return np.eye(D) / D
    q, _ = np.linalg.qr(draws.numpy.randn(D, D))
    cov = (q @ np.diag(np.arange(1.0, D + 1.0))) @ q.T
    return cov / np.trace(cov)


def _fixed_task(D: int, draws: Draws, init_scheme: str) -> torch.Tensor:
    """w_fix (D, 1): N(0, I); from jan2025 on rescaled to norm √D (multiply first, then divide by the norm)."""
    w = draws.normal((D, 1))
    if init_scheme != "dec2024":
        w = (w * math.sqrt(D)) / torch.linalg.vector_norm(w)
    return w


def _whiten(W: torch.Tensor) -> torch.Tensor:
    """Task vectors (n, D, 1) with zero sample mean and identity sample covariance (divisor n − 1), by ZCA.

    In float32 as the reference does it: centre; ``torch.cov`` (which re-centres); ``eigh``; M = V diag(1/√λ) Vᵀ
    with numpy's correctly rounded square root; then the centred vectors times Mᵀ.
    """
    A = (W - W.mean(dim=0, keepdim=True))[:, :, 0]
    lam, V = torch.linalg.eigh(torch.cov(A.T))
    r = 1.0 / torch.from_numpy(np.sqrt(lam.numpy()))
    M = (V @ torch.diag(r)) @ V.T
    return (A @ M.T)[:, :, None]


def _block(n: int, seq_len: int, cov: np.ndarray, w_fix: torch.Tensor, draws: Draws, *, icl: float,
          init_scheme: str) -> Sequences:
    """n sequences of ``seq_len`` tokens by the reference's recipe; float32, query label zeroed, targets apart."""
    D = cov.shape[0]
    x64 = draws.numpy.multivariate_normal(np.zeros(D), cov, size=n * seq_len, check_valid="ignore")
    X = torch.from_numpy(x64.astype(np.float32)).reshape(n, seq_len, D)
    X = X - X.mean(dim=0, keepdim=True)
    if icl == 0.0:
        if init_scheme != "dec2024":
            draws.normal((n, D, 1))  # the task vectors are drawn and discarded
        Y = draws.normal((n, seq_len, 1))
        Y[:, -1] = X[:, -1] @ w_fix
    else:
        W = draws.normal((n, D, 1))
        if icl == 1.0:
            W = _whiten(W)
        else:
            W[int(n * icl):] = w_fix  # the first ⌊n·c⌋ keep their raw draws
        Y = torch.bmm(X, W)
    S = torch.cat([X, Y], dim=-1)
    y = S[:, -1, D].clone()
    S[:, -1, D] = 0.0
    return Sequences(X=S.numpy(), y=y.numpy())


def cubic_features(X: np.ndarray) -> np.ndarray:
    """The reference's float32 cubic feature z = vec(b x_qᵀ), b = Σ_n y_n x_n (its ``--cubic_feat`` input, (P, D²)).

    linattn computes this feature in the engine's precision (``models.cubic_features``); this is the float32
    version the reference feeds its MLP, kept to check the draws against the reference's arrays.
    """
    S = torch.from_numpy(X)
    D = S.shape[-1] - 1
    b = torch.bmm(S.transpose(1, 2), S)[:, :D, D]
    return torch.bmm(b[:, :, None], S[:, -1, None, :D]).reshape(S.shape[0], D * D).numpy()


def _init_weights(model: str, init_scheme: str, draws: Draws, *, H: int, D: int, R: int, init: float) -> dict:
    """The reference's constructors and initialisation, in its module order (all float32).

    Separate key/query (attnS): dec2024 W_K, W_Q ~ N(0, init²) untouched and W_V = init·e_D e_Dᵀ (its normal draw
    thrown away); jan2025 per head W_K, W_Q ~ N(0, init²/(R·E)), the key's label column zeroed, W_V drawn twice
    (N(0, init²/E²) thrown away, then N(0, init²)); dec2025 one call per matrix for all heads with std
    init/√(numel). Merged (attnM): per head (dec2024, jan2025) or one call (dec2025) of N(0, init²). mlp: W1, w2 ~
    N(0, init²). Afterwards the blocks the theory keeps at zero are zeroed (they stay trainable).
    """
    E = D + 1
    if model == "mlp":
        draws.linear(H * D * D)
        draws.linear(H)
        return {"W1": draws.normal((H, D * D), init).numpy(), "w2": draws.normal((1, H), init)[0].numpy()}
    per_head = init_scheme != "dec2025"
    if model == "attnS":
        for numel in (R * E, R * E, E * E):  # key, query, value constructors (one uniform per entry)
            draws.linear(H * numel)
        if init_scheme == "dec2024":
            K = torch.stack([draws.normal((R, E), init) for _ in range(H)])
            Q = torch.stack([draws.normal((R, E), init) for _ in range(H)])
            V = torch.zeros(H, E, E)
            for h in range(H):
                draws.normal((E, E), init)
                V[h, D, D] = init
            return {"W_Q": Q.numpy(), "W_K": K.numpy(), "W_V": V.numpy()}
        if init_scheme == "jan2025":
            K = torch.stack([draws.normal((R, E), init / (R * E) ** 0.5) for _ in range(H)])
            Q = torch.stack([draws.normal((R, E), init / (R * E) ** 0.5) for _ in range(H)])
            heads: list[torch.Tensor] = []
            for h in range(H):
                draws.normal((E, E), init / (E * E) ** 0.5)
                heads.append(draws.normal((E, E), init))
            V = torch.stack(heads)
        else:
            K = draws.normal((H * R, E), init / (H * R * E) ** 0.5).reshape(H, R, E)
            Q = draws.normal((H * R, E), init / (H * R * E) ** 0.5).reshape(H, R, E)
            V = draws.normal((H * E, E), init / (H * E * E) ** 0.5).reshape(H, E, E)
        K[:, :, D] = 0.0
        V[:, D, :D] = 0.0
        return {"W_Q": Q.numpy(), "W_K": K.numpy(), "W_V": V.numpy()}
    if model == "attnM":
        for _ in range(2):  # KQ, value constructors
            draws.linear(H * E * E)
        if per_head:
            KQ = torch.stack([draws.normal((E, E), init) for _ in range(H)])
            V = torch.stack([draws.normal((E, E), init) for _ in range(H)])
        else:
            KQ = draws.normal((H * E, E), init).reshape(H, E, E)
            V = draws.normal((H * E, E), init).reshape(H, E, E)
        KQ[:, :D, D] = 0.0
        V[:, D, :D] = 0.0
        return {"W_KQ": KQ.numpy(), "W_V": V.numpy()}
    raise ValueError(f"unknown model {model!r}")


def reference_data(*, init_scheme: str, in_dim: int, seq_len: int, trainset_size: int, testset_size: int = 0,
                   icl: float = 1.0, white_cov: bool = False, seed: int = 10) -> tuple[Datasets, Draws]:
    """The data sets the authors' code draws for these flags and seed (steps 1–4 of the recipe above), and its two
    generators as they stand afterwards, where the model's weights are drawn from (:func:`reference_init`).

    In dec2024 the training set always follows the icl = 1 recipe (that code had no ``--icl`` flag), so ``icl`` must
    be 1 there.
    """
    if init_scheme not in INIT_SCHEMES:
        raise ValueError(f"init_scheme must be one of {', '.join(INIT_SCHEMES)}, got {init_scheme!r}")
    if init_scheme == "dec2024" and icl != 1.0:
        raise ValueError("the dec2024 code had no --icl flag (its training set always has icl = 1)")
    D = in_dim
    draws = Draws(seed)
    w_fix = _fixed_task(D, draws, init_scheme)
    cov = _covariance(D, draws, white=white_cov)
    train = _block(trainset_size, seq_len, cov, w_fix, draws, icl=icl, init_scheme=init_scheme)
    test_iwl = test_icl = None
    if testset_size:
        test_iwl = _block(testset_size, seq_len, cov, w_fix, draws, icl=0.0, init_scheme=init_scheme)
        test_icl = _block(testset_size, seq_len, cov, w_fix, draws, icl=1.0, init_scheme=init_scheme)
    return Datasets(train=train, test_iwl=test_iwl, test_icl=test_icl, cov=cov, w_fix=w_fix[:, 0].numpy()), draws


def reference_init(draws: Draws, *, model: str, init_scheme: str, in_dim: int, head_num: int = 1, rank: int = 1,
                   init: float = 0.01) -> dict[str, np.ndarray]:
    """The initial weights the authors' code draws after the data (step 5), from a fork of ``draws`` (the
    generators :func:`reference_data` returned, which are left as they are), in the layout of ``init.npz``."""
    return _init_weights(model, init_scheme, draws.fork(), H=head_num, D=in_dim, R=rank, init=init)


def reference_draws(*, model: str, init_scheme: str, in_dim: int, seq_len: int, trainset_size: int,
                    testset_size: int = 0,
                    icl: float = 1.0, white_cov: bool = False, head_num: int = 1, rank: int = 1,
                    init: float = 0.01, seed: int = 10) -> tuple[Datasets, dict[str, np.ndarray]]:
    """The data and initial weights the authors' code draws for these flags and seed, in its order
    (:func:`reference_data`, then :func:`reference_init`).

    Returns the data sets (float32 sequences, float64 Λ, float32 w_fix) and the initial weights in the layout of
    ``init.npz`` (float32).
    """
    data, draws = reference_data(init_scheme=init_scheme, in_dim=in_dim, seq_len=seq_len,
                                 trainset_size=trainset_size, testset_size=testset_size, icl=icl,
                                 white_cov=white_cov, seed=seed)
    return data, reference_init(draws, model=model, init_scheme=init_scheme, in_dim=in_dim, head_num=head_num,
                                rank=rank, init=init)

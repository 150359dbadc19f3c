"""The paper's theory, as functions: population moments, fixed points, plateau losses, time courses.

Two normalisations of the loss: ``normalize="mean"``, the paper's (β = (1/N) Σ_n y_n x_n, model output with the
1/N), and ``normalize="sum"``, the reference implementation's (a sum over context tokens, no 1/N), whose model output
is N times the paper's for the same weights. Every function whose result depends on the choice takes ``normalize`` as
a required keyword (no default, so a factor of N is never implied); the others (losses, plateau levels, times in τ)
are the same in both or are stated in the paper's. Time is t/τ, in units of τ: full-batch GD with rate η in the
paper's normalisation advances t/τ = 2η per step (gradient flow τ θ̇ = −½ ∂L/∂θ, loss without ½;
:func:`steps_to_time` converts a run's steps).

Notation (paper, Section 2): x ~ N(0, Λ), w ~ N(0, I_D), y = wᵀx, N context pairs, λ_1 ≥ … ≥ λ_D the eigenvalues of
Λ with eigenvectors e_d. Every function accepts Λ as a D×D matrix or as a 1-D array of its eigenvalues (then Λ is
that diagonal matrix, e_d the coordinate axes). Eigen-directions are always indexed in *decreasing* eigenvalue order:
direction 0 is the largest.

Any predictor of the form ŷ = βᵀ A x_q has the population loss (the basis of everything below)

    L(A) = tr Λ − 2 tr(A Λ²) + tr(A Λ Aᵀ E[Λ̂²]),   E[Λ̂²] = Λ² + (Λ + tr(Λ) I) Λ / N.

Attention heads give ŷ = βᵀ A x_q plus terms even in the labels (``models._Attention.in_context_heads``); those
terms vanish while the heads' "null" blocks are zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .normalization import (  # noqa: F401
    N_FACTORS,
    NORMALIZATIONS,
    check,
    feature_scale,
    to_paper_normalisation,
    to_reference_normalisation,
    weight_scale_to_paper,
)
from .weights import attn_s_scales

# --------------------------------------------------------------------------------------------------------------
# Covariance helpers and moments
# --------------------------------------------------------------------------------------------------------------

def _as_covariance(cov) -> np.ndarray:
    """Λ as a D×D float64 matrix (a 1-D array of eigenvalues becomes the diagonal matrix)."""
    cov = np.asarray(cov, dtype=np.float64)
    if cov.ndim == 1:
        return np.diag(cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"covariance must be a square matrix or a 1-D spectrum, got shape {cov.shape}")
    return cov


def spectrum(cov: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(λ, E): eigenvalues in decreasing order and the matching eigenvectors as columns of E."""
    lam, vecs = np.linalg.eigh(_as_covariance(cov))
    order = np.argsort(lam)[::-1]
    return lam[order], vecs[:, order]


def residual_kurtosis(cov: ArrayLike, learned: int = 0) -> float:
    """κ of the residual on the plateau M_m (``learned`` = m directions learned) over fresh tasks w ~ N(0, I) and
    inputs x ~ N(0, Λ) (``cov``: Λ, or its eigenvalues), leaving out the in-context estimation error: the residual
    is Σ_{d>m} w_d x_d, Gaussian given w with variance s = Σ_{d>m} λ_d w_d², so E[r⁴] = 3 E[s²] and
    κ = 3(1 + 2 Σ λ_d²/(Σ λ_d)²) over the directions d > m (3, Gaussian, when none is left). On M_0 with the
    eigenvalues 0.4, 0.3, 0.2, 0.1 it is 4.8, and at P = 5000 the standard error of L(M_0) = 1 is 0.028 (0.025
    measured over 300 of the reference's centred, whitened training sets; the Gaussian value is 0.020); on M_2,
    with 0.2 and 0.1 left, 6.3."""
    c = np.asarray(cov, dtype=np.float64)
    lam = (spectrum(c)[0] if c.ndim == 2 else np.sort(c)[::-1])[int(learned):]
    if lam.size == 0 or lam.sum() <= 0:
        return 3.0
    return float(3.0 * (1.0 + 2.0 * np.sum(lam**2) / np.sum(lam) ** 2))


def c_d(cov: ArrayLike, N: int) -> np.ndarray:
    """c_d = 1 + (1 + tr Λ / λ_d) / N for each eigen-direction (decreasing λ); λ_d c_d is E[Λ̂²]'s eigenvalue / λ_d."""
    lam, _ = spectrum(cov)
    return 1.0 + (1.0 + lam.sum() / lam) / N


def expected_lambda_hat_sq(cov: ArrayLike, N: int) -> np.ndarray:
    """E[Λ̂²] = Λ² + (Λ + tr(Λ) I) Λ / N for Λ̂ = (1/N) Σ_n x_n x_nᵀ with Gaussian x (Isserlis' theorem)."""
    L = _as_covariance(cov)
    return L @ L + (L + np.trace(L) * np.eye(len(L))) @ L / N


def mean_yz(cov: ArrayLike, N: int, *, normalize: str) -> np.ndarray:
    """E[y_q z] = vec(Λ²) (D²,) for the cubic feature z[i·D + j] = b_i x_q,j (``models.cubic_features``).

    b = β in the paper's normalisation, N β in the reference's (then the result is N vec(Λ²)). Λ² is symmetric, so
    row- and column-major vec agree.
    """
    L = _as_covariance(cov)
    return feature_scale(N, normalize=normalize) * (L @ L).reshape(-1)


def second_moment_z(cov: ArrayLike, N: int, *, normalize: str) -> np.ndarray:
    """E[z zᵀ] (D², D²) in the ordering z[i·D + j] = b_i x_q,j: kron(E[Λ̂²], Λ), i.e. entry [iD+j, kD+l] =
    E[Λ̂²]_ik Λ_jl (β and x_q are independent, E_w[β βᵀ] = E[Λ̂²]). Times N² in the reference's normalisation.

    (Λ ⊗ E[Λ̂²] up to the vec ordering; with our row-major z it is E[Λ̂²] ⊗ Λ.)
    """
    return feature_scale(N, normalize=normalize) ** 2 * np.kron(expected_lambda_hat_sq(cov, N), _as_covariance(cov))


def loss_of_A(A: ArrayLike, cov: ArrayLike, N: int, *, normalize: str) -> float:
    """Population loss of ŷ = βᵀ A x_q: tr Λ − 2 tr(A Λ²) + tr(A Λ Aᵀ E[Λ̂²]).

    With ``normalize="sum"``, ``A`` is the matrix of a reference-normalised model (ŷ = N βᵀ A x_q), i.e. N·A is
    used in the formula.
    """
    L = _as_covariance(cov)
    A = feature_scale(N, normalize=normalize) * np.asarray(A, dtype=np.float64)
    M = expected_lambda_hat_sq(L, N)
    return float(np.trace(L) - 2 * np.trace(A @ L @ L) + np.trace(A @ L @ A.T @ M))


def predictor_distance(A: ArrayLike, B: ArrayLike, cov: ArrayLike, N: int, *, normalize: str) -> float:
    """E[(βᵀ A x_q − βᵀ B x_q)²] = tr((A−B) Λ (A−B)ᵀ E[Λ̂²]): the mean squared gap between two predictors."""
    Dm = feature_scale(N, normalize=normalize) * (np.asarray(A, float) - np.asarray(B, float))
    return float(np.trace(Dm @ _as_covariance(cov) @ Dm.T @ expected_lambda_hat_sq(cov, N)))


# --------------------------------------------------------------------------------------------------------------
# Normalisation and time conversion
# --------------------------------------------------------------------------------------------------------------

def steps_to_time(steps: ArrayLike, lr: float, *, normalize: str, model: str | None = None,
                  N: int | None = None) -> np.ndarray | float:
    """The gradient-flow time of GD step ``steps`` in units of τ, in the paper's normalisation: t/τ = 2·η·step.

    η is the paper-normalised rate: ``lr`` itself for ``normalize="mean"``; for ``normalize="sum"`` (give ``model``
    and ``N``) ``lr`` converted by :func:`~linattn.normalization.to_paper_normalisation`, so that every run of the same
    trajectory lands on the same t/τ. The only step ↔ time conversion of the package (``flow.gradient_flow`` integrates
    in steps).
    """
    check(normalize)
    if normalize == "sum":
        if model is None or N is None:
            raise ValueError("converting a reference-normalised run needs model and N")
        lr = to_paper_normalisation(model, N, lr=lr, init=1.0)[0]
    return 2.0 * lr * np.asarray(steps, dtype=np.float64)


def time_to_steps(t: ArrayLike, lr: float, *, normalize: str, model: str | None = None,
                  N: int | None = None) -> np.ndarray | float:
    """Inverse of :func:`steps_to_time`: the (float) GD step at which t/τ (paper normalisation) is reached."""
    return np.asarray(t, dtype=np.float64) / steps_to_time(1.0, lr, normalize=normalize, model=model, N=N)


# --------------------------------------------------------------------------------------------------------------
# ATTN_M (and the MLP on z): two fixed-point sets, one drop
# --------------------------------------------------------------------------------------------------------------

@dataclass
class FixedPoint:
    """A fixed point in function space: its in-context matrix A (ŷ = βᵀ A x_q) and its population loss."""

    name: str
    A: np.ndarray
    loss: float


def optimal_A(cov: ArrayLike, N: int, *, normalize: str) -> np.ndarray:
    """The global minimiser A* = E[Λ̂²]⁻¹ Λ = (Λ + (Λ + tr(Λ) I)/N)⁻¹ (→ Λ⁻¹, least squares, as N → ∞).

    Paper normalisation. With ``normalize="sum"`` the reference's model computes N βᵀ A x_q, so its converged
    matrix is A*/N.
    """
    L = _as_covariance(cov)
    A = np.linalg.inv(L + (L + np.trace(L) * np.eye(len(L))) / N)
    return A / feature_scale(N, normalize=normalize)


def loss_star(cov: ArrayLike, N: int) -> float:
    """L* = tr Λ − Σ_d λ_d / c_d, the loss at the global minimum (either normalisation)."""
    lam, _ = spectrum(cov)
    return float(lam.sum() - np.sum(lam / c_d(cov, N)))


def attn_m_mode(cov: ArrayLike, N: int) -> tuple[float, float, np.ndarray]:
    """(s, λ_z, ê): s = ‖E[y_q z]‖ (the top singular value of the vector E[y_q z]), ê its direction, and the
    curvature λ_z = êᵀ E[zzᵀ] ê along it (paper normalisation)."""
    m = mean_yz(cov, N, normalize="mean")
    s = float(np.linalg.norm(m))
    e = m / s
    return s, float(e @ second_moment_z(cov, N, normalize="mean") @ e), e


def attn_m_escape_time(cov: ArrayLike, N: int, w_init: float) -> float:
    """Leading-order escape time from the origin, (1/s) ln(1/w_init) in units of τ (paper normalisation)."""
    s, _, _ = attn_m_mode(cov, N)
    return float(np.log(1.0 / w_init) / s)


def logistic_half_time(s: float, lam_z: float, a0: float) -> float:
    """t/τ at which the logistic τ ȧ = 2a(s − λ_z a), a(0) = a0, reaches half its final value s/λ_z:
    (1/2s) ln(s/(λ_z a0) − 1). Its leading term for small a0 is (1/s) ln(1/√a0), the escape time above. NaN when a0
    is already past half the final value (there is no half-way point to reach)."""
    ratio = s / (lam_z * a0) - 1.0
    return float(np.log(ratio) / (2.0 * s)) if ratio > 1 else float("nan")  # ratio ≤ 1: a0 ≥ s/(2 λ_z)


def attn_m_drop_time(cov: ArrayLike, N: int, a0: float) -> float:
    """Half-drop time of ATTN_M (t/τ, paper normalisation) from an initial product a0 along the top mode ê.

    Exact for white Λ from an aligned balanced start (a0 = w_init²). For a random small start use
    ``diagnostics.attn_m_effective_a0`` for a0; for non-white Λ it is an estimate (ê is then not an eigenvector of
    E[zzᵀ]).
    """
    s, lam_z, _ = attn_m_mode(cov, N)
    return logistic_half_time(s, lam_z, a0)


def white_sigma(t: ArrayLike, D: int, N: int, w_init: float, kappa: float = 1.0) -> np.ndarray | float:
    """σ(t) of ATTN_M for white Λ = κ I from a small balanced start aligned with the solution (ŷ = σ βᵀ x_q).

    The product a = ‖w₂‖‖W₁‖ follows τ ȧ = 2a(s − λ_z a), a(0) = w_init², with s = κ²√D, λ_z = c κ³,
    c = 1 + (1+D)/N, and σ = a/√D:

        σ(t) = (s/√D) / [λ_z (1 − e^{−2st/τ}) + (s/w_init²) e^{−2st/τ}]

    (written with e^{−2st} so it never overflows). κ = 1 gives the Λ = I form
    σ = e^{2√D t}/[c(e^{2√D t} − 1) + √D/w_init²]; κ = 1/D the reference's white covariance, σ(∞) = D/c.
    ``t`` is t/τ (paper normalisation).
    """
    t = np.asarray(t, dtype=np.float64)
    s = kappa**2 * np.sqrt(D)
    lam_z = white_c(D, N) * kappa**3
    decay = np.exp(-2.0 * s * t)
    a = s / (lam_z * (1.0 - decay) + (s / w_init**2) * decay)
    return a / np.sqrt(D)


def white_c(D: int, N: int) -> float:
    """c = 1 + (1 + D)/N: c_d for white covariance (all directions alike, any κ)."""
    return 1.0 + (1.0 + D) / N


def white_loss(sigma: ArrayLike, D: int, N: int, kappa: float = 1.0) -> np.ndarray | float:
    """L(σ) for A = σ I and Λ = κ I: Dκ − 2σDκ² + cσ²Dκ³ (κ = 1: D[1 − 2σ + cσ²]; κ = 1/D: 1 − 2σ/D + cσ²/D²)."""
    sigma = np.asarray(sigma, dtype=np.float64)
    c = white_c(D, N)
    return D * kappa - 2 * sigma * D * kappa**2 + c * sigma**2 * D * kappa**3


# --------------------------------------------------------------------------------------------------------------
# ATTN_S: 2^D fixed points, saddle-to-saddle dynamics
# --------------------------------------------------------------------------------------------------------------

def fixed_point_A(cov: ArrayLike, N: int, subset: Iterable[int], *, normalize: str) -> np.ndarray:
    """A_S = Σ_{d∈S} (λ_d c_d)⁻¹ e_d e_dᵀ, the fixed point that has learned the eigen-directions in ``subset``
    (indices into the decreasing order; the empty set is the origin). Divided by N for ``normalize="sum"``."""
    lam, E = spectrum(cov)
    c = c_d(cov, N)
    idx = np.asarray(sorted(set(int(i) for i in subset)), dtype=int)
    if idx.size and (idx.min() < 0 or idx.max() >= len(lam)):
        raise ValueError(f"subset {subset} has indices outside 0..{len(lam) - 1}")
    weights = 1.0 / (lam[idx] * c[idx])
    return (E[:, idx] * weights) @ E[:, idx].T / feature_scale(N, normalize=normalize)


def fixed_point_loss(cov: ArrayLike, N: int, subset: Iterable[int]) -> float:
    """L(A_S) = tr Λ − Σ_{d∈S} λ_d / c_d (either normalisation)."""
    lam, _ = spectrum(cov)
    idx = np.asarray(sorted(set(int(i) for i in subset)), dtype=int)
    return float(lam.sum() - np.sum(lam[idx] / c_d(cov, N)[idx]))


def all_fixed_points(cov: ArrayLike, N: int, *, normalize: str) -> list[FixedPoint]:
    """All 2^D fixed points of ATTN_S (enough heads, R·H ≥ D), one per subset of eigen-directions."""
    D = _as_covariance(cov).shape[0]
    out = []
    for mask in range(1 << D):
        subset = [d for d in range(D) if mask >> d & 1]
        out.append(FixedPoint("{" + ",".join(str(d + 1) for d in subset) + "}",
                              fixed_point_A(cov, N, subset, normalize=normalize), fixed_point_loss(cov, N, subset)))
    return out


def plateau_losses(cov: ArrayLike, N: int) -> np.ndarray:
    """L(M_0), …, L(M_D): M_m has learned the m largest directions; L(M_m) = tr Λ − Σ_{d≤m} λ_d/c_d."""
    lam, _ = spectrum(cov)
    return lam.sum() - np.concatenate([[0.0], np.cumsum(lam / c_d(cov, N))])


def pcr_weights(cov: ArrayLike, N: int, m: int, *, normalize: str) -> np.ndarray:
    """The in-context algorithm at plateau M_m: Σ_{d≤m} (λ_d c_d)⁻¹ e_d e_dᵀ (PCR on the top m components as
    N → ∞; m = D gives the minimum, ``optimal_A``)."""
    return fixed_point_A(cov, N, range(m), normalize=normalize)


def final_value_weights(cov: ArrayLike, N: int, *, normalize: str, model: str = "attnS") -> np.ndarray:
    """The converged value weight of the head that learned direction d, (λ_d c_d)^{-1/3} (balanced rank-one heads,
    paper normalisation; ÷N^{1/3} for ``normalize="sum"``), decreasing λ order."""
    lam, _ = spectrum(cov)
    return (lam * c_d(cov, N)) ** (-1.0 / 3.0) / weight_scale_to_paper(model, N, normalize=normalize)


def scalar_ode(lam: float, c: float, v0: float, t: ArrayLike) -> np.ndarray:
    """v(t) from τ v̇ = λ² v² − c λ³ v⁵, v(0) = v0 (the learning head of ATTN_S, R = 1), at the times ``t`` (t/τ,
    increasing, from 0). Solved with scipy's ``solve_ivp`` (LSODA: the approach to the fixed point is stiff)."""
    from scipy.integrate import solve_ivp  # here: importing scipy.integrate costs every page that never needs it

    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError("t must be a non-empty increasing 1-D array starting at or after 0")
    sol = solve_ivp(lambda _, v: lam**2 * v**2 - c * lam**3 * v**5, (0.0, float(t[-1])), [v0], t_eval=t,
                    method="LSODA", rtol=1e-10, atol=1e-14)
    if not sol.success:
        raise RuntimeError(f"solve_ivp failed: {sol.message}")
    return sol.y[0]


def scalar_loss(cov: ArrayLike, N: int, m: int, v: ArrayLike) -> np.ndarray:
    """L = L(M_m) − 2λ²v³ + cλ³v⁶ with λ = λ_{m+1}, c = c_{m+1}: the loss while the (m+1)-th direction is learned."""
    lam, c = spectrum(cov)[0][m], c_d(cov, N)[m]
    v = np.asarray(v, dtype=np.float64)
    return plateau_losses(cov, N)[m] - 2 * lam**2 * v**3 + c * lam**3 * v**6


def scalar_loss_curve(cov: ArrayLike, N: int, m: int, v0: float, t: ArrayLike) -> np.ndarray:
    """The scalar reduction's loss curve for drop m → m+1 from v(0) = v0, at times ``t`` (t/τ from 0)."""
    lam, c = spectrum(cov)[0][m], c_d(cov, N)[m]
    return scalar_loss(cov, N, m, scalar_ode(lam, c, v0, t))


def v_from_loss_drop(cov: ArrayLike, N: int, m: int, drop: float) -> float:
    """The head size v at which the loss has fallen ``drop`` below L(M_m) during drop m → m+1 (before the
    minimum): the smaller root x = v³ of cλ³x² − 2λ²x + drop = 0."""
    lam, c = spectrum(cov)[0][m], c_d(cov, N)[m]
    disc = (2 * lam**2) ** 2 - 4 * c * lam**3 * drop
    if drop < 0 or disc < 0:
        raise ValueError(f"a drop of {drop} is outside [0, λ/c = {lam / c}]")
    x = (2 * lam**2 - np.sqrt(disc)) / (2 * c * lam**3)
    return float(x ** (1.0 / 3.0))


def attn_s_escape_time(lam: float, v0: float) -> float:
    """τ/(λ² v0): the blow-up time of τ v̇ = λ²v² (the leading-order escape time; a power law in v0)."""
    return float(1.0 / (lam**2 * v0))


def attn_s_drop_steps(cov: ArrayLike, N: int, *, lr: float, init: float, rank: int = 1, head_num: int = 1,
                      init_scheme: str = "jan2025", normalize: str) -> np.ndarray:
    """Escape-time estimate of each drop d = 1 … D, in GD steps from step 0, for ATTN_S.

    τ/(λ_d² v₀) (:func:`attn_s_escape_time`) with v₀ the geometric mean of a head's three starting scales, the value
    and the key and query entries, as the initialisation era ``init_scheme`` sets them (``models.attn_s_scales``; e.g.
    jan2025: v₀ = init/(R(D+1))^{1/3}), in the paper's normalisation (``init`` and ``lr`` are converted when
    ``normalize="sum"``).
    """
    lam = spectrum(cov)[0]
    if normalize == "sum":
        init = to_paper_normalisation("attnS", N, lr=lr, init=init)[1]
    kq, v = attn_s_scales(init_scheme, init, head_num=head_num, in_dim=len(lam), rank=rank)
    v0 = (v * kq * kq) ** (1.0 / 3.0)
    t = np.array([attn_s_escape_time(lam_d, v0) for lam_d in lam])
    return np.asarray(time_to_steps(t, lr, normalize=normalize, model="attnS", N=N))


def long_plateaus(D: int, rank: int) -> list[int]:
    """The plateaus M_m predicted to be long for rank-R heads: m = 0, R, 2R, … below D (M_D is the end)."""
    if rank < 1:
        raise ValueError("rank must be >= 1")
    return list(range(0, D, rank))


def vary_len_plateau_losses(cov: ArrayLike, seq_len: int, *, normalize: str) -> np.ndarray:
    """L(M_0), …, L(M_D) for the loss averaged over prefix lengths (``--vary_len``): n = 2 … seq_len tokens,
    N = n − 1 context pairs each, one model shared by all lengths.

    The prefix with N pairs sees the feature s_N β: s_N = N/(N+1) in the reference's normalisation (it divides by
    the prefix's n tokens), 1 in the paper's. For A = Σ_d a_d e_d e_dᵀ the averaged loss is
    tr Λ + Σ_d [−2 a_d λ_d² ⟨s⟩ + a_d² λ_d³ ⟨s² c_d⟩] (⟨·⟩ the mean over N, c_d = c_d(N)); it is minimised by
    a_d = ⟨s⟩/(λ_d ⟨s² c_d⟩), so learning direction d lowers the loss by λ_d ⟨s⟩² / ⟨s² c_d⟩ and
    L(M_m) = tr Λ − Σ_{d≤m} λ_d ⟨s⟩²/⟨s² c_d⟩ (M_D: the minimum of ATTN_M under ``--vary_len``).
    """
    lam, _ = spectrum(cov)
    check(normalize)
    Ns = np.arange(1, seq_len)
    s = Ns / (Ns + 1.0) if normalize == "sum" else np.ones(len(Ns))
    c = np.array([c_d(cov, int(n)) for n in Ns])          # (lengths, D)
    gain = lam * s.mean() ** 2 / np.mean(s[:, None] ** 2 * c, axis=0)
    return lam.sum() - np.concatenate([[0.0], np.cumsum(gain)])

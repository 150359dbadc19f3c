"""``--draws reference``: the authors' random numbers, checked against arrays made by the authors' own code.

Each fixture in ``fixtures/reference_draws`` was made by running the authors' code at one of its three eras (seeding,
data generation, model creation and 50 of its own float32 full-batch steps, on CPU). Its name says era, model, heads,
rank, D, seq_len, init and seed; its ``flags`` entry holds the exact command line. For each one, linattn must draw
the same arrays (float32 bit for bit; the labels, which pass through float32 LAPACK and BLAS kernels that differ
between CPUs, to 16 float32 epsilons of the largest label) and its training losses must follow the authors' to 1e-5.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from linattn.cli import build_parser, config_from_args
from linattn.config import ConfigError, RunConfig
from linattn.reference_draws import cubic_features, reference_draws
from linattn.training.experiment import run
from linattn.training.plan import draw

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "reference_draws").glob("*.npz"))
# model names of the Dec 2024 code, which linattn's CLI knows by their later names
OLD_NAMES = {"attn": "attnS", "attn_KQ": "attnM"}


def fixture_config(path: Path) -> RunConfig:
    """The fixture's own command line, parsed by ``linattn train`` (the reference's flags), at the fixture's era."""
    fx = np.load(path)
    flags = str(fx["flags"]).split()
    i = flags.index("--model") + 1
    flags[i] = OLD_NAMES.get(flags[i], flags[i])
    return config_from_args(build_parser().parse_args(["train", *flags, "--init_scheme", str(fx["era"])]))


def assert_same(name: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    """Identical dtype, shape and bits (NaN where NaN), else a message naming the array and the first difference."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (
        f"{name}: ours {ours.dtype}{ours.shape}, the reference's {theirs.dtype}{theirs.shape}")
    differ = ~((ours == theirs) | (np.isnan(ours) & np.isnan(theirs)))
    if differ.any():
        first = tuple(int(i) for i in np.argwhere(differ)[0])
        pytest.fail(f"{name}: {int(differ.sum())} of {ours.size} entries differ; first at index {first}: "
                    f"ours {ours[first]!r}, the reference's {theirs[first]!r}")


def drawn_arrays(cfg: RunConfig) -> dict[str, np.ndarray]:
    """Our draws for ``cfg`` under the fixtures' names (the mlp fixture's X is the float32 cubic feature)."""
    data, weights = draw(cfg)
    out = dict(w_fix=data.w_fix, y=data.train.y, X=data.train.X, **weights)
    if cfg.model == "mlp":
        out.update(X=cubic_features(data.train.X), seq_prefeat=data.train.X)
    for key in ("test_iwl", "test_icl"):
        seqs = getattr(data, key)
        if seqs is not None:
            out.update({f"{key}_X": seqs.X, f"{key}_y": seqs.y})
    return out


def test_there_is_a_fixture_for_every_era_and_model():
    names = [p.stem for p in FIXTURES]
    assert len(names) == 23
    for era in ("dec2024", "jan2025", "dec2025"):
        for case in ("sep_", "merged_", "mlp_"):
            assert any(n.startswith(f"{era}_{case}") for n in names), (era, case)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_array_is_the_reference_s(path):
    fx = np.load(path)
    cfg = fixture_config(path)
    # numpy's multivariate normal factors Λ by an SVD whose signs come from the LAPACK build: if they differ from
    # the authors' machine, every token differs, so say that first rather than report a thousand mismatches
    _, _, vh = np.linalg.svd(fx["cov"])
    assert np.array_equal(np.sign(vh), np.sign(fx["cov_svd_vh_this_machine"])), (
        "this machine's LAPACK returns other singular-vector signs than the authors' (see linattn.reference_draws)")
    ours = drawn_arrays(cfg)
    expected = [k for k in fx.files if k not in ("flags", "era", "commit", "cov", "cov_svd_vh_this_machine")
                and not k.startswith("authors_")]
    assert sorted(ours) == sorted(expected)
    D = cfg.in_dim
    for name in expected:
        theirs, mine = fx[name], ours[name]
        label_made = name.endswith("y") or (name == "X" and cfg.model == "mlp")  # the cubic feature holds labels
        if (name.endswith("X") and not label_made) or name == "seq_prefeat":  # tokens exact, label column below
            assert_same(name, np.delete(mine, D, axis=-1), np.delete(theirs, D, axis=-1))
            mine, theirs, label_made = mine[..., D], theirs[..., D], True
        if not label_made:
            assert_same(name, mine, theirs)
        else:
            # Labels go through float32 LAPACK/BLAS (eigh in the whitening, bmm): its last bits depend on the kernel
            # the CPU picks, so across machines they agree to a few float32 epsilons of the largest label
            assert_same(name, mine.dtype.type(0) * mine, theirs.dtype.type(0) * theirs)  # dtype and shape
            np.testing.assert_allclose(mine, theirs, rtol=0, atol=16 * np.finfo(np.float32).eps * np.abs(theirs).max(),
                                       err_msg=name)
    # Λ is float64 from a 4×4 QR and two matrix products, whose last bit depends on the BLAS kernel the CPU picks
    # (the authors' machine and this one differ there); everything drawn from it in float32 is identical above.
    data, _ = draw(cfg)
    np.testing.assert_allclose(data.cov, fx["cov"], rtol=0, atol=4 * np.finfo(np.float64).eps, err_msg="cov")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_first_50_losses_follow_the_authors(path):
    fx = np.load(path)
    history = run(fixture_config(path), progress=False).history
    assert len(history.train_loss) == 50
    np.testing.assert_allclose(history.train_loss, fx["authors_loss"], rtol=0, atol=1e-5, err_msg="train loss")
    if "authors_test_iwl" in fx.files:
        np.testing.assert_allclose(history.test_iwl, fx["authors_test_iwl"], rtol=0, atol=1e-5, err_msg="in-weight")
        np.testing.assert_allclose(history.test_icl, fx["authors_test_icl"], rtol=0, atol=1e-5, err_msg="in-context")


def test_no_global_random_state_is_read_or_changed():
    torch_state, numpy_state = torch.random.get_rng_state(), np.random.get_state()
    kwargs = dict(model="attnS", init_scheme="jan2025", in_dim=3, seq_len=5, trainset_size=20, head_num=2, init=0.1,
                  seed=3)
    first = reference_draws(**kwargs)
    torch.rand(7), np.random.rand(7)  # moving the global generators must not change the draws
    second = reference_draws(**kwargs)
    assert np.array_equal(first[0].train.X, second[0].train.X)
    assert all(np.array_equal(first[1][k], second[1][k]) for k in first[1])
    torch.random.set_rng_state(torch_state), np.random.set_state(numpy_state)
    reference_draws(**kwargs)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state()[1:3], numpy_state[1:3]))


def test_the_initial_weights_depend_on_the_data_the_reference_drew_first():
    """Model creation follows the data on one torch stream: a larger P moves the weights (streams keeps them)."""
    base = dict(model="attnM", head_num=2, in_dim=3, seq_len=5, epoch=1)
    small, large = (draw(RunConfig(trainset_size=P, **base))[1]["W_KQ"] for P in (20, 21))
    assert not np.array_equal(small, large)
    small, large = (draw(RunConfig(trainset_size=P, draws="streams", **base))[1]["W_KQ"] for P in (20, 21))
    assert np.array_equal(small, large)


@pytest.mark.parametrize("option, message", [
    (dict(spectrum=(0.4, 0.3, 0.2, 0.1)), "spectrum has no reference draws"),
    (dict(cov_matrix=np.eye(4).tolist()), "cov_matrix has no reference draws"),
    (dict(trainset_size=None), "trainset_size=None has no reference draws"),
    (dict(normalize="mean"), 'normalize="mean" has no reference draws'),
    (dict(init_scheme="dec2024", icl=0.5), "Dec 2024 code had no icl option"),
])
def test_options_the_reference_never_had_are_refused_where_drawn(option, message):
    """Valid settings, but the authors' code never drew them: refused when drawing, by linattn.draw and the CLI."""
    cfg = RunConfig(**{"in_dim": 4, "seq_len": 5, "trainset_size": 20, **option})
    cfg.validate()
    with pytest.raises(ConfigError, match=message):
        draw(cfg)
    draw(RunConfig(**{**cfg.to_dict(), "draws": "streams", "trainset_size": cfg.trainset_size}))  # streams have them

"""Every figure's ``--param`` values are checked before any kernel starts, together and in any order (issue 45,
findings 8 and 9): a schematic's ``head_num=-5``, ``in_dim=100000`` and ``head_num=1000000`` started a kernel that
failed (or drew for minutes at 6.3 GB), and Figure 4 refused ``in_dim=6, ranks=[1,3]`` in one order only."""

from __future__ import annotations

import pytest

from linattn.cli import main
from linattn.companion import figures, presets
from linattn.config import ConfigError, RunConfig

# every figure with presets, asked of the registry; each with the run settings it takes (its own or its runs')
FIGURES = [n for n in figures.names() if presets.has_presets(n)]


def _settings(name: str) -> dict:
    """The figure's settings at the quick preset that are run settings, and the nested runs' ones."""
    quick, fields = presets.table(name)["quick"], set(RunConfig.field_names())
    own = {k: v for k, v in quick.items() if k in fields}
    for run in presets.nested_runs(name):
        own.update({k: v for k, v in quick[run].items() if k in fields and k not in own})
    return own


@pytest.mark.parametrize("name", FIGURES)
def test_a_negative_size_is_refused_up_front(name):
    sizes = [k for k in ("head_num", "in_dim", "epoch", "seq_len") if k in _settings(name)]
    if not sizes:
        pytest.skip(f"{name} has no size among its settings")
    for key in sizes:
        with pytest.raises(ConfigError, match=rf"^{name}: --param {key}=-5 gives .*{key}"):
            presets.check_overrides(name, "quick", {key: -5})


@pytest.mark.parametrize("name", FIGURES)
def test_a_huge_model_is_refused_up_front(name, monkeypatch):
    """A million heads or D = 100000 where 2 GiB are available: the memory check (or, for a schematic, the drawing's
    size) refuses it."""
    monkeypatch.setattr("linattn.training.memory.available_memory", lambda: 2**31)
    sizes = [k for k in ("head_num", "in_dim") if k in _settings(name)]
    if not sizes:
        pytest.skip(f"{name} has neither head_num nor in_dim")
    for key, value in (("head_num", 10**6), ("in_dim", 10**5)):
        if key in sizes:
            with pytest.raises(ConfigError, match=rf"^{name}: --param {key}={value} gives"):
                presets.check_overrides(name, "quick", {key: value})


@pytest.mark.parametrize("args", [["head_num=-5"], ["in_dim=100000"], ["head_num=1000000"]])
def test_a_schematic_refused_leaves_nothing(args, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["figures", "--preset", "quick", "--only", "fig01a_attnm_schematic", "--out", str(out)]
    assert main(argv + [a for p in args for a in ("--param", p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn figures: error: fig01a_attnm_schematic: --param") and err.count("\n") == 1
    assert not out.exists()


def test_overrides_are_checked_together_in_any_order():
    """Figure 4 at in_dim = 6 with ranks 1 and 3: valid, whichever override comes first; ranks up to 8 are not, and
    the refusal names both overrides (neither alone is wrong)."""
    name = "fig04_low_rank"
    presets.check_overrides(name, "quick", {"in_dim": 6, "ranks": [1, 3]})
    presets.check_overrides(name, "quick", {"ranks": [1, 3], "in_dim": 6})
    for given in ({"in_dim": 6, "ranks": [1, 8]}, {"ranks": [1, 8], "in_dim": 6}):
        with pytest.raises(ConfigError, match=r"--param .* give an invalid run: rank must be .* got 8") as e:
            presets.check_overrides(name, "quick", given)
        assert "--param in_dim=6" in str(e.value) and "--param ranks=[1, 8]" in str(e.value)

"""Settings resolved once (issue 46, "Resolve once"): a figure build resolves its settings, checks its model, builds
its runs and validates each run once, across the runner, its pool worker and the notebook's kernel; the kernel is
given them as data (:class:`linattn.companion.presets.Resolved`), and a notebook run by hand resolves its parameters
cell once."""

from __future__ import annotations

import copy
import json
import os
import pickle
from collections import Counter

import numpy as np
import pytest
from counting import counting

from linattn import objectives
from linattn.companion import presets
from linattn.companion.figures import contract
from linattn.companion.figures.common.runs import Once
from linattn.companion.runner import schedule
from linattn.config import ConfigError, RunConfig
from linattn.training import plan as plan_mod

FIG3A = "fig03a_attns_loss"


@pytest.mark.slow
def test_a_build_resolves_validates_and_plans_once(tmp_path, monkeypatch):
    """Figure 3a at the quick preset with ``--param seeds=[3]``, counted in every process of the build: the settings
    are resolved (``presets.settings``) and their model checked once, in the runner, never again in the worker or the
    kernel (``presets.parameters`` is the hand-run route); ``runs(S)`` is built once; each run's settings are
    validated once (the two runs the figure declares, in the runner; the population run the kernel derives for the
    predicted drops, where it is made)."""
    module = contract(FIG3A).module
    monkeypatch.setattr(module, "runs", Once(module.runs.function))  # no build of an earlier test remembered
    monkeypatch.setenv("LINATTN_RUNS_DIR", str(tmp_path / "runs"))
    out = tmp_path / "out"
    with counting(tmp_path / "count", monkeypatch) as read:
        [result] = schedule.run_figures(preset="quick", only=[FIG3A], overrides={"seeds": [3]}, out=out, jobs=1,
                                        progress=False)
        assert result.status == "ran", result.error
        calls, where = read(), read(by_process=True)
        validated = Counter(detail for _, what, detail in read(details=True) if what == "config.RunConfig._check_all")
    assert calls["presets.settings"] == calls["presets.resolve"] == calls["presets.check_model"] == 1
    assert calls["presets.parameters"] == 0
    assert calls[f"{FIG3A}.runs"] == 1
    runner = {os.getpid()}
    for what in ("presets.settings", "presets.check_model", f"{FIG3A}.runs"):
        assert set(where[what]) == runner, what  # neither the worker nor the kernel resolves again
    declared = presets.run_configs(FIG3A, "quick", {"seeds": [3]})
    assert len(declared) == 2 and {c.seed for c in declared} == {3}
    assert set(validated.values()) == {1}, validated  # every run once
    assert len(validated) == len(declared) + 1  # the declared runs and the population run of the predicted drops
    assert sum("engine=population" in run for run in validated) == 1
    # the kernel ran with the runner's settings: the page's record, and the executed notebook showing them
    recorded = json.loads((out / FIG3A / "provenance.json").read_text())["parameters"]
    assert recorded["seeds"] == [3] and recorded == json.loads(json.dumps(presets.resolve(FIG3A, "quick",
                                                                                          {"seeds": [3]})))
    assert "seeds = [3]" in (out / f"{FIG3A}.ipynb").read_text() and ".resolved" not in str(list(out.rglob("*")))


def test_the_kernel_gets_the_settings_as_they_were_resolved(tmp_path):
    """What the runner hands the kernel reads back as it was: a dict's int keys (Figure 4's per-rank horizons), and
    runs whose settings were validated (not validated again)."""
    resolved = presets.prepare("fig04_low_rank", "quick", {"epoch_extended": {2: 999}})
    again = presets.given({presets.GIVEN: str(resolved.save(tmp_path / "resolved.pickle"))})
    assert again.settings == resolved.settings and 2 in again.settings["epoch_extended"]
    assert list(again.runs) == list(resolved.runs) and all(r.validated for r in again.runs.values())
    assert presets.given({"preset": "quick"}) is None  # run by hand: the parameters cell's values


def test_a_notebook_run_by_hand_resolves_its_parameters_cell_once(monkeypatch):
    """Without the runner, a page's settings are its parameters cell's values, checked once (its model)."""
    namespace = dict(presets.resolve(FIG3A, "quick"), preset="quick")
    checked = []
    monkeypatch.setattr(presets, "check_model", lambda name, s: checked.append(name))
    assert presets.parameters(FIG3A, namespace) == presets.resolve(FIG3A, "quick") and checked == [FIG3A] * 2


def test_prepare_refuses_a_reader_value_as_check_overrides_does():
    with pytest.raises(ConfigError, match=rf"^{FIG3A}: --param seeds=\[-1\] gives an invalid run"):
        presets.prepare(FIG3A, "quick", {"seeds": [-1]})
    assert presets.prepare("fig01a_attnm_schematic", "quick").runs is None  # it trains nothing
    assert presets.for_build("beyond_error_table", {"preset": "quick"}) is None  # no presets: params as they are


def test_runs_are_built_once_per_settings():
    built = []

    def runs(S):
        built.append(dict(S))
        return {"a": RunConfig(seed=S["seed"])}

    once = Once(runs)
    S = {"seed": 1}
    first, second = once(S), once(dict(S))
    assert first == second and first is not second and len(built) == 1  # equal settings: the same runs, a new dict
    S["seed"] = 2  # a changed dict is a new request
    assert once(S)["a"].seed == 2 and len(built) == 2
    once.give({"seed": 5}, {"given": RunConfig(seed=5)})
    assert list(once({"seed": 5})) == ["given"] and len(built) == 2
    assert once({"seed": 5, "spectrum": np.ones(2)}) and once({"seed": 5, "spectrum": np.ones(2)}) and len(built) == 4
    assert isinstance(contract(FIG3A).runs, Once) and contract(FIG3A).module.runs is contract(FIG3A).runs


def test_a_run_is_validated_once_and_again_when_it_changes(monkeypatch):
    calls = []
    real = RunConfig._check_all
    monkeypatch.setattr(RunConfig, "_check_all", lambda self: calls.append(self.seed) or real(self))
    cfg = RunConfig(seed=4, epoch=50)
    assert not cfg.validated
    plan_mod.plan(cfg)
    plan_mod.plan(cfg)
    assert cfg.validated and calls == [4] and cfg.validate() is cfg and calls == [4]  # checked once
    for kept in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg)), cfg.replaced(track_value=True),
                 cfg.replaced(epoch=80)):
        assert kept.validated  # a copy, or a change that keeps a valid run valid by itself
    for changed in (cfg.replaced(epoch=20), cfg.replaced(epoch=80.5), cfg.replaced(head_num=3)):
        assert not changed.validated  # shorter (record's last step), not an integer, or another setting
    monkeypatch.setitem(objectives.ENGINES, "another", objectives.Autograd)  # what the settings are checked against
    assert not cfg.validated
    monkeypatch.delitem(objectives.ENGINES, "another")
    assert cfg.validated
    cfg.head_num = 0  # changed in place after its check
    assert not cfg.validated
    with pytest.raises(ConfigError, match="head_num"):
        plan_mod.plan(cfg)

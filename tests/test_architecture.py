"""The shape of the package: imports run one way, no cycle, no module hidden by a name, one engine registry, and the
old names of this release still working with a warning."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import linattn
from linattn import RunConfig, objectives

ROOT = Path(linattn.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    out = {}
    for path in ROOT.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        parts = ["linattn", *rel.parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _graph() -> dict[str, set[str]]:
    """module → the package modules it imports anywhere in its code (inside functions too). ``from P import x`` is an
    edge to the module ``P.x`` when there is one, else to ``P`` itself (whose ``__init__`` must then have run)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([base] if base else []))
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
        graph[name] = {e for e in edges if e in mods and e != name}
    return graph


def test_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " → ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_core_never_imports_the_companion_or_the_cli():
    graph = _graph()
    core = [m for m in graph if not m.startswith(("linattn.companion", "linattn.cli", "linattn.__main__"))]
    assert "linattn.experiment" in core and "linattn.objectives.exact" in core
    for module in core:
        upward = {m for m in graph[module] if m.startswith(("linattn.companion", "linattn.cli"))}
        assert not upward, f"{module} imports {sorted(upward)}"


def test_no_submodule_is_hidden_by_a_name_of_its_package():
    for name in _modules():
        if not name.endswith("__main__"):  # running it is `python -m linattn`
            importlib.import_module(name)
    for package in (linattn, linattn.objectives, linattn.companion):
        for info in pkgutil.iter_modules(package.__path__):
            full = f"{package.__name__}.{info.name}"
            attr = getattr(package, info.name, None)
            assert attr is None or attr is importlib.import_module(full), f"{full} is hidden by {attr!r}"


def test_every_engine_declares_what_the_registry_asks():
    cfg = RunConfig()
    for name, engine in objectives.ENGINES.items():
        assert engine.name == name
        assert engine.preferred_device in ("cpu", "accelerator")
        assert isinstance(engine.linear_only, bool)
        assert isinstance(engine.trial_steps(5), int)
        assert engine.refuses(cfg) is None or isinstance(engine.refuses(cfg), str)
    assert objectives.resolve(cfg) == "exact"


def test_a_registered_engine_is_accepted_everywhere(monkeypatch):
    """One class in the registry is all a new objective needs: validation, run() and the CLI accept it."""
    from linattn.cli import build_parser, config_from_args

    class Halved(objectives.Autograd):
        name = "halved"

        def value_and_grad(self, model):
            return super().value_and_grad(model)

    monkeypatch.setitem(objectives.ENGINES, "halved", Halved)
    cfg = RunConfig(engine="halved", in_dim=2, seq_len=4, trainset_size=10, epoch=3, draws="streams")
    res = linattn.run(cfg.validate(), progress=False)
    assert res.engine == "halved" and len(res.history.train_loss) == 3
    assert config_from_args(build_parser().parse_args(["train", "--engine", "halved"])).engine == "halved"
    monkeypatch.delitem(objectives.ENGINES, "halved")
    with pytest.raises(linattn.ConfigError, match="engine must be one of"):
        cfg.validate()


@pytest.mark.parametrize("old, new", [("linattn.engines", "linattn.objectives"),
                                      ("linattn.figure_io", "linattn.companion.output"),
                                      ("linattn.presets", "linattn.companion.presets")])
def test_moved_modules_still_import_with_a_warning(old, new):
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=new):
        module = importlib.import_module(old)
    target = importlib.import_module(new)
    assert all(getattr(module, n) is getattr(target, n) for n in dir(target) if not n.startswith("_"))


def test_renamed_names_still_work_with_a_warning():
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    with pytest.warns(FutureWarning) as caught:
        old = linattn.init_weights("attnS", heads=2, in_dim=3, scheme="jan2025", rng=rng())
    assert sorted(str(w.message).split("; use ")[1] for w in caught) == ["head_num=", "init_scheme="]
    new = linattn.init_weights("attnS", head_num=2, in_dim=3, init_scheme="jan2025", rng=rng())
    assert all(np.array_equal(old[k], new[k]) for k in new)
    with pytest.warns(FutureWarning, match="Autograd"):
        assert objectives.PerSample is objectives.Autograd
    with pytest.warns(FutureWarning, match="out_dim"):
        assert RunConfig(out_dim=1) == RunConfig()
    with pytest.raises(TypeError, match="both"):
        linattn.init_weights("attnS", heads=2, head_num=2, in_dim=3, rng=rng())


def test_gradient_descent_takes_epoch_and_the_old_epochs():
    from linattn.train import gradient_descent

    cfg = RunConfig(in_dim=2, seq_len=4, trainset_size=10, epoch=4, draws="streams")
    datasets, init = linattn.draw(cfg)
    losses = []
    for kwargs in ({"epoch": 4}, {"epochs": 4}):
        model = linattn.build_model(cfg.model, init)
        objective = objectives.Exact.from_data(model, datasets.train)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses.append(gradient_descent(model, objective, lr=0.01, progress=False, **kwargs).train_loss)
        assert any(issubclass(w.category, FutureWarning) for w in caught) == ("epochs" in kwargs)
    assert np.array_equal(*losses)

"""The shape of the package: imports run one way, no cycle, no module hidden by a name, one engine registry, no import
hook, and the public API (``linattn.__all__``) as the API page documents it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

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


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, which never run."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, (ast.Name, ast.Attribute)) and \
                (getattr(node.test, "id", None) or getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            inside.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return inside


def _graph() -> dict[str, set[str]]:
    """module → the package modules it imports anywhere in its code (inside functions too; not under ``if
    TYPE_CHECKING:``, which never runs). ``from P import x`` is an edge to the module ``P.x`` when there is one, else
    to ``P`` itself (whose ``__init__`` must then have run)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
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
    assert "linattn.training.experiment" in core and "linattn.objectives.exact" in core
    for module in core:
        upward = {m for m in graph[module] if m.startswith(("linattn.companion", "linattn.cli"))}
        assert not upward, f"{module} imports {sorted(upward)}"


def test_no_submodule_is_hidden_by_a_name_of_its_package():
    for name in _modules():
        if not name.endswith("__main__"):  # running it is `python -m linattn`
            importlib.import_module(name)
    for package in _packages():
        for info in pkgutil.iter_modules(package.__path__):
            full = f"{package.__name__}.{info.name}"
            attr = getattr(package, info.name, None)
            assert attr is None or attr is importlib.import_module(full), f"{full} is hidden by {attr!r}"


def _packages() -> list:
    """Every package of linattn, imported."""
    names = [n for n, path in _modules().items() if path.name == "__init__.py" and n != "linattn.figures_src"]
    return [importlib.import_module(n) for n in sorted(names)]


def _top_modules(package: Path) -> list[str]:
    """The modules at the top of a package folder, ``__init__`` included (subpackages are rooms, not counted)."""
    return sorted(p.stem for p in package.glob("*.py"))


def test_the_core_and_the_companion_hold_few_modules_at_their_tops():
    """Rooms that show the architecture: the core at most 15 modules at its top (a run's modules in ``training``, its
    readings in ``analysis``), the companion at most 12 (the figure runner in ``companion/runner``)."""
    assert len(_top_modules(ROOT)) <= 15, _top_modules(ROOT)
    assert len(_top_modules(ROOT / "companion")) <= 12, _top_modules(ROOT / "companion")


def test_no_two_modules_share_a_name():
    """Each module (and package) name appears once in the package, so that a name says which module it is."""
    seen: dict[str, list[str]] = {}
    for name in _modules():
        if name != "linattn":
            seen.setdefault(name.rsplit(".", 1)[1], []).append(name)
    repeated = {short: names for short, names in seen.items() if len(names) > 1}
    assert not repeated, f"modules of one name: {repeated}"


def _private_imports(path: Path) -> list[str]:
    """The private names (``_x``, not dunder) a module imports from another module of the package."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("linattn")):
            out += [f"{node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__") and a.name not in ("_lazy", "_version")]
    return out


def test_no_private_name_is_imported_across_modules():
    found = {name: names for name, path in _modules().items() if (names := _private_imports(path))}
    assert not found, f"private names imported from another module: {found}"
    assert _private_imports_of("from .plan import _draw, plan\nfrom .. import _lazy") == ["plan._draw"]


def _private_imports_of(code: str) -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.py"
        path.write_text(code, encoding="utf-8")
        return _private_imports(path)


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


@pytest.mark.slow
def test_import_linattn_installs_no_import_hook():
    """``import linattn`` leaves ``sys.meta_path`` as it found it, and no module path of another layout is served."""
    code = textwrap.dedent("""
        import importlib, sys
        before = list(sys.meta_path)
        import linattn, linattn.cli, linattn.companion
        assert sys.meta_path == before, (before, sys.meta_path)
        for gone in ("linattn._compat", "linattn.engines", "linattn.figure_io", "linattn.book"):
            try:
                importlib.import_module(gone)
            except ModuleNotFoundError:
                continue
            raise AssertionError(f"{gone} imports")
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_api_page_documents_exactly_linattn_all():
    """``linattn.__all__`` is the public API: the API page's table names each of its names, and the page names no
    other top-level name (``linattn.<module>`` paths of the reference section are modules, not exports)."""
    public = set(linattn.__all__)
    assert len(public) == len(linattn.__all__) and all(hasattr(linattn, name) for name in public)
    page = (ROOT.parent / "book" / "api.md").read_text(encoding="utf-8")
    start = page.index("| name | what it is |")
    table = page[start:page.index("\n\n", start)]
    listed = set(re.findall(r"`linattn\.(\w+)`", table))
    assert listed == public, (f"in __all__, not in the API page's table: {sorted(public - listed)}; "
                              f"in the table, not in __all__: {sorted(listed - public)}")
    modules = {info.name for info in pkgutil.iter_modules(linattn.__path__)}
    claimed = set(re.findall(r"\blinattn\.(\w+)", page)) - modules - {"__all__"}
    assert claimed <= public, f"the API page names linattn.{sorted(claimed - public)}, not in linattn.__all__"


def _autodoc_target(path: str):
    """The object an autodoc directive's dotted ``path`` names: its longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ImportError(path)


def test_the_api_reference_documents_every_name_in_linattn_all():
    """Each name of ``linattn.__all__`` is rendered in the API page's reference: an autodoc directive names that very
    object (by any path), not only the table. ``__version__`` is a string, with no docstring to render: the table
    names it."""
    page = (ROOT.parent / "book" / "api.md").read_text(encoding="utf-8")
    paths = re.findall(r"^\.\. auto(?:function|class|exception|module|method)::\s*(\S+)", page, re.M)
    targets = []
    for path in paths:
        try:
            targets.append(_autodoc_target(path))
        except (ImportError, AttributeError) as err:
            raise AssertionError(f"the API page documents {path}, which does not import: {err}") from None
    undocumented = [name for name in linattn.__all__ if name != "__version__"
                    and not any(target is getattr(linattn, name) for target in targets)]
    assert not undocumented, f"in linattn.__all__, not rendered by the API page's reference: {undocumented}"


# ---------------------------------------------------------------- a figure is its notebook and its module

FIGURES_DIR = ROOT / "companion" / "figures"
NOTEBOOKS = ROOT.parent / "figures_src"


def _figure_names() -> list[str]:
    from linattn.companion import figures

    return figures.names()


@pytest.mark.skipif(not NOTEBOOKS.is_dir(), reason="an installed copy has no figures_src/ beside the package")
def test_every_notebook_is_a_figure_module_of_its_name_and_nothing_else_is():
    """figures/ holds exactly one module per notebook of figures_src/ (its stem) plus the common subpackage."""
    stems = sorted(p.stem for p in NOTEBOOKS.glob("*.md"))
    assert _figure_names() == stems, (f"notebooks without a module: {sorted(set(stems) - set(_figure_names()))}; "
                                      f"modules without a notebook: {sorted(set(_figure_names()) - set(stems))}")
    packages = sorted(p.name for p in FIGURES_DIR.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["common"]


def test_a_figure_declares_its_settings_and_a_training_figure_its_runs():
    """Each figure module declares NAME (its module's name), PRESETS (paper and quick), TOLERANCES and the names of
    the published readings it compares with (each a name in the module itself or in linattn.companion.published's
    modules); one whose presets hold run settings (a ``model``, also in a nested run) declares ``runs``, and no
    module keeps a ``settings`` wrapper."""
    from linattn.companion import figures, published
    from linattn.companion.figures.common.preset_blocks import nested

    for name in _figure_names():
        module = figures.module(name)
        assert module.NAME == name and set(module.PRESETS) == {"paper", "quick"}, name
        assert isinstance(module.TOLERANCES, list), name
        parts = (module, published.readings, published.rules, published.page)
        assert all(any(hasattr(part, p) for part in parts) for p in figures.contract(name).PUBLISHED), name
        assert not hasattr(module, "settings"), f"{name}: presets.settings(module, ...) is the one settings call"
        trains = any("model" in run for run in nested(module.PRESETS["paper"]).values())
        assert not trains or figures.contract(name).runs is not None, f"{name} trains but declares no runs(S)"


def test_a_training_figure_without_runs_is_caught(monkeypatch):
    """The rule above fails for a figure that trains and declares no runs (a module stripped of its runs)."""
    from linattn.companion import figures

    module = figures.module(next(n for n in _figure_names() if hasattr(figures.module(n), "runs")))
    monkeypatch.delattr(module, "runs")
    with pytest.raises(AssertionError, match="declares no runs"):
        test_a_figure_declares_its_settings_and_a_training_figure_its_runs()


def _named_figures(text: str, names) -> set[str]:
    return {n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", text)}


def test_a_figure_is_named_only_in_its_own_module():
    """No file of the package names a figure (a notebook stem) but the figure's own module: the registry, the
    presets, the runner, the README table and the tests find figures from the modules. Comments and docstrings are
    held to it too: a name in prose goes stale when the figure is renamed."""
    names = _figure_names()
    found = {}
    for path in sorted(ROOT.rglob("*")):
        if path.suffix not in (".py", ".md", ".toml", ".yml", ".json", ".txt") or "__pycache__" in path.parts:
            continue
        named = _named_figures(path.read_text(encoding="utf-8"), names) - {path.stem}
        if named:
            found[str(path.relative_to(ROOT))] = sorted(named)
    assert not found, f"figures named outside their modules: {found}"
    assert _named_figures("see fig03a_attns_loss.", ["fig03a_attns_loss"]) == {"fig03a_attns_loss"}


# A paper figure named in code or prose: FIG1B, fig3a_comparison, _FIG14_STEPS, "Figure 14", "Fig. 1a", "figures 3"
_PAPER_FIGURE = re.compile(r"(?<![a-z])fig(?:ure)?s?[._ ]*\d", re.IGNORECASE)
# What several figures share: it names no figure of the paper (each figure's readings, rules and panels live with
# its own module, ``figures/<name>.py``)
_GENERIC = ("companion/published", "companion/plotting.py", "companion/uncertainty.py")


def test_generic_modules_name_no_paper_figure():
    """The published readings' types and rules, the plotting helpers and the verdict machinery name no figure of
    the paper: not as an identifier (``FIG14``, ``fig3a_comparison``), not in a string or a docstring ("Figure 1b")."""
    paths = [p for g in _GENERIC for p in sorted((ROOT / g).rglob("*.py") if (ROOT / g).is_dir() else [ROOT / g])]
    assert len(paths) >= 5, paths
    found = {str(p.relative_to(ROOT)): sorted({m.group(0) for m in _PAPER_FIGURE.finditer(p.read_text("utf-8"))})
             for p in paths}
    assert not {k: v for k, v in found.items() if v}, f"figures named in generic modules: {found}"
    caught = ["FIG1B_IMAGE", "fig3a_comparison", "_FIG14_EXTREME_STEPS", "the paper's Figure 14", "Fig. 1a",
              "figures 3a and 3b", "fig03a_attns_loss"]
    assert all(_PAPER_FIGURE.search(text) for text in caught)
    kept = ("figure_x", "Figure X", "configure 3 runs", "figsize=(6, 3)")
    assert not any(_PAPER_FIGURE.search(text) for text in kept)


def _builds_runs_outside_runs(tree: ast.Module) -> list[int]:
    """Lines of a module that build run settings (``RunConfig(...)``, ``RunConfig.from_dict``,
    ``dataclasses.replace``) outside its function ``runs``."""
    inside = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "runs":
            inside |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in inside:
            f = node.func
            text = ast.unparse(f)
            if text.endswith(("RunConfig", "RunConfig.from_dict", "dataclasses.replace")):
                out.append(node.lineno)
    return out


def test_no_run_settings_are_built_in_a_figure_module_outside_runs():
    found = {}
    for name in _figure_names():
        lines = _builds_runs_outside_runs(ast.parse((FIGURES_DIR / f"{name}.py").read_text(encoding="utf-8")))
        if lines:
            found[name] = lines
    assert not found, f"run settings built outside runs(S) (module: lines): {found}"
    constructed = ast.parse("def runs(S):\n    return RunConfig()\n\ndef compute(S):\n    return RunConfig(seed=1)\n")
    assert _builds_runs_outside_runs(constructed) == [5]

"""environment.yml (conda users) must list exactly the requirements of pyproject.toml."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def requirements(project: dict) -> list[str]:
    """Every requirement of pyproject's project table, its extras' included; an extra that names another of
    linattn's own extras (``linattn[sweep]``) adds nothing of its own."""
    every = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    return [r for r in every if not re.match(r"\s*linattn\s*\[", r)]


def normalise(req: str) -> str:
    name, spec = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", req).groups()
    return re.sub(r"[-_.]+", "-", name).lower() + ",".join(sorted(s.strip() for s in spec.split(",") if s.strip()))


def python_allowed(conda_pin: str, requires_python: str) -> bool:
    """Whether environment.yml's ``python=X.Y`` satisfies pyproject's ``requires-python``, compared as versions
    (as strings "3.9" >= "3.11" would hold)."""
    return Version(conda_pin.split("=")[-1]) in SpecifierSet(requires_python)


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(map(normalise, requirements(project)))
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {normalise(r) for r in pip if not r.startswith("-e")}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python_allowed(python, project["requires-python"]), (python, project["requires-python"])


def test_constraints_pin_what_pyproject_requires():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in requirements(project):
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", req).group()).lower()
        assert name in pins, f"{name} is required but not pinned in constraints.txt"
    assert pins["torch"] == "2.13.0"


def test_the_figure_notebooks_are_package_data():
    """pyproject maps the data-only package linattn.figures_src onto the repository's top-level figures_src/ and
    ships its notebooks (tests/test_installed.py builds the wheel and runs it)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "linattn.figures_src" in tool["packages"]
    folder = ROOT / tool["package-dir"]["linattn.figures_src"]
    assert folder == ROOT / "figures_src" and sorted(folder.glob("*.md"))
    assert "*.md" in tool["package-data"]["linattn.figures_src"]


def test_every_package_of_the_source_is_in_the_wheel():
    """pyproject lists its packages by hand: a new subpackage left out would be missing from an installed copy."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "linattn").rglob("__init__.py")}
    assert found <= set(tool["packages"]), f"not in pyproject's packages: {sorted(found - set(tool['packages']))}"

"""The package's types are checked: mypy (configured in pyproject.toml, ``[tool.mypy]``) passes, ``py.typed`` ships
with the package, and at least 90 % of the core's public functions are fully annotated.

The core is ``linattn/`` without its ``companion/`` and ``cli/`` rooms. A public function is a module-level function or
a method of a module-level class whose name does not start with ``_``; it is fully annotated when every parameter
(``self``/``cls`` aside) and its return carry an annotation. ``python tests/test_types.py`` prints the ratio and, with
``-v``, every function still unannotated.
"""

import ast
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "linattn"
OUTSIDE_CORE = ("companion", "cli")
ANNOTATED_FLOOR = 0.90


def core_files(package=PACKAGE):
    """The core's modules: every ``.py`` under the package but its companion and CLI rooms."""
    return [path for path in sorted(package.rglob("*.py"))
            if path.relative_to(package).parts[0] not in OUTSIDE_CORE]


def _is_method_bound(node):
    """A method whose first parameter is the instance or class (any but a staticmethod)."""
    return not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def public_functions(tree):
    """(function node, bound method?) for each public module-level function and public method of a top-level class."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            yield node, False
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and not member.name.startswith("_"):
                    yield member, _is_method_bound(member)


def fully_annotated(node, bound):
    """Every parameter (the bound ``self``/``cls`` aside, ``*args``/``**kwargs`` included) and the return annotated."""
    args = node.args
    params = args.posonlyargs + args.args
    if bound:
        params = params[1:]
    params = params + args.kwonlyargs + [p for p in (args.vararg, args.kwarg) if p is not None]
    return node.returns is not None and all(p.annotation is not None for p in params)


def annotation_census(files):
    """(annotated, total, names of the unannotated as ``path:line name``) over the public functions of ``files``."""
    annotated, total, missing = 0, 0, []
    for path in files:
        for node, bound in public_functions(ast.parse(path.read_text(), filename=str(path))):
            total += 1
            if fully_annotated(node, bound):
                annotated += 1
            else:
                missing.append(f"{path}:{node.lineno} {node.name}")
    return annotated, total, missing


def test_census_counts_constructed_cases(tmp_path):
    source = '''
def typed(a: int, *rest: str, k: float = 1.0, **more: int) -> None: ...
def no_return(a: int): ...
def one_bare(a: int, b) -> int: ...
def bare_star(*rest) -> None: ...
def _private(a): ...
class Thing:
    def method(self, a: int) -> int: ...
    def bare(self, a) -> int: ...
    @staticmethod
    def static(a) -> int: ...
    @classmethod
    def build(cls) -> "Thing": ...
    def _hidden(self, a): ...
'''
    (tmp_path / "mod.py").write_text(source)
    annotated, total, missing = annotation_census([tmp_path / "mod.py"])
    assert (annotated, total) == (3, 8)
    assert sorted(line.split()[-1] for line in missing) == ["bare", "bare_star", "no_return", "one_bare", "static"]


def test_core_files_leave_out_the_companion_and_cli(tmp_path):
    for rel in ("a.py", "run/b.py", "companion/c.py", "cli/d.py", "companion/runner/e.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in core_files(tmp_path)] == ["a.py", "run/b.py"]


def test_core_public_functions_are_annotated():
    annotated, total, missing = annotation_census(core_files())
    assert total > 0
    assert annotated / total >= ANNOTATED_FLOOR, (
        f"{annotated} of {total} public functions of the core annotated ({annotated / total:.0%}); unannotated:\n"
        + "\n".join(missing))


def test_py_typed_ships_with_the_package():
    assert (PACKAGE / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["linattn"]


def test_mypy_checks_the_whole_package():
    """The checked files are the whole package, and no override silences a module's errors (the companion and CLI
    rooms are checked like the core); an override may only let mypy skip a library that ships no types."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["linattn"]
    for override in config.get("overrides", []):
        assert set(override) <= {"module", "ignore_missing_imports"}, override
        modules = [override["module"]] if isinstance(override["module"], str) else override["module"]
        assert not any(m == "linattn" or m.startswith("linattn.") for m in modules), override


@pytest.mark.slow
def test_mypy_is_clean(tmp_path):
    """``python -m mypy`` with pyproject.toml's settings (the files it names: the package) reports no error; its cache
    goes to a temporary folder, not the checkout."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir",
                           str(tmp_path / "mypy_cache")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


if __name__ == "__main__":
    annotated, total, missing = annotation_census(core_files())
    if "-v" in sys.argv:
        print("\n".join(missing))
    print(f"{annotated} of {total} public functions of the core fully annotated ({annotated / total:.1%})")

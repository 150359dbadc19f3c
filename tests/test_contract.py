"""Every registered figure module keeps the figure contract (``figures.figure_contract.Figure``), and the contract
refuses a module that does not."""

import types

import pytest

from linattn.companion import figures
from linattn.companion.figures import figure_contract as contract


@pytest.mark.parametrize("name", figures.names())
def test_every_figure_module_keeps_the_contract(name):
    fig = figures.contract(name)
    assert fig.NAME == name and fig.module is figures.module(name)
    for key in contract.OPTIONAL:  # an optional name the module declares is its own, not the contract's default
        if hasattr(fig.module, key):
            assert getattr(fig, key) is getattr(fig.module, key), (name, key)


def _module(name="fake_fig", **names):
    module = types.ModuleType(f"linattn.companion.figures.{name}")
    base = dict(NAME=name, PRESETS={"paper": {}, "quick": {}}, KNOB_CASES=({}, {}), TOLERANCES=[],
                numbers=lambda ds: [], plot=lambda ds: None)
    for key, value in {**base, **names}.items():
        if value is not ...:
            setattr(module, key, value)
    return module


def test_optional_names_take_the_contracts_defaults():
    fig = contract.of_module(_module())
    assert (fig.HELP, fig.PUBLISHED, fig.README_ROWS, fig.runs, fig.check) == ({}, (), (), None, None)


@pytest.mark.parametrize("key", contract.REQUIRED)
def test_a_module_missing_a_required_name_is_refused(key):
    with pytest.raises(TypeError, match=f"does not declare {key}"):
        contract.of_module(_module(**{key: ...}))


@pytest.mark.parametrize("key, value, match", [
    ("PRESETS", [], "PRESETS must be a dict"),
    ("PRESETS", {"paper": {}}, "PRESETS must hold exactly paper, quick"),
    ("KNOB_CASES", [{}], "KNOB_CASES must be a tuple"),
    ("KNOB_CASES", ({}, 3), "every KNOB_CASES entry must be a dict"),
    ("TOLERANCES", (), "TOLERANCES must be a list"),
    ("NAME", "other", "not its module's name"),
    ("plot", "a plot", "plot must be a function"),
    ("runs", {}, "runs must be a function"),
    ("HELP", [("k", "v")], "HELP must be a dict"),
])
def test_a_module_with_a_wrong_type_is_refused(key, value, match):
    with pytest.raises(TypeError, match=match):
        contract.of_module(_module(**{key: value}))


def test_no_reader_of_the_package_defaults_a_contract_name():
    """The optional names' defaults are declared once, in the contract: no ``getattr(module, "HELP", {})`` elsewhere."""
    import pathlib
    import re

    import linattn.companion

    root = pathlib.Path(linattn.companion.__file__).parent
    keys = "|".join(contract.REQUIRED + contract.OPTIONAL)
    pattern = re.compile(rf"getattr\([^,()]+,\s*[\"']({keys})[\"']\s*,|hasattr\([^,()]+,\s*[\"']({keys})[\"']\)")
    found = {str(p.relative_to(root)): pattern.findall(p.read_text()) for p in root.rglob("*.py")
             if p.name != "figure_contract.py"}
    assert not {p: f for p, f in found.items() if f}

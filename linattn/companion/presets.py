"""A figure's settings, read from its module's declarations: every figure module (:mod:`linattn.companion.figures`)
declares ``PRESETS = {"paper": {...}, "quick": {...}}`` (``paper``: the published settings; ``quick``: CI-sized)
and ``runs(S)``, the runs its settings ``S`` make. This module is the generic machinery over them::

    settings(fig, "quick", head_num=12)        # a figure's settings at a preset, with overrides
    resolve(name, "quick", {"head_num": 12})   # what the runner gives the notebook's parameters cell
    run_configs(name, "paper")                 # the RunConfig of each run it trains: its runs(S)
    check_overrides(name, "quick", {"lr": 5})  # a reader's --param planned through runs(S) before any work
    prepare(name, "quick", {"seeds": [3]})     # all of it once: the settings and the runs a build hands its kernel

A build resolves a figure's settings once, in the runner (:func:`prepare`, a :class:`Resolved`): the settings, checked,
and its module's ``runs(S)``, each run planned (its settings validated). The runner hands that record to the notebook's
kernel as data (:meth:`Resolved.save`, :func:`given`), which uses it as it is; a notebook run by hand, without the
runner, resolves its parameters cell's values once there (:func:`parameters`).

The notebooks' parameters cells are written from the ``paper`` presets with :func:`knob_help`
(:func:`linattn.companion.runner.notebooks.parameters_source`). The building blocks several figures' presets share, the
knob help of knobs several figures have and the sweep rule are in :mod:`linattn.companion.figures.common.preset_blocks`.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

from .figures.common.preset_blocks import nested
from .figures.common.runs import configs as _declared


def _contract(name):
    """Figure ``name``'s contract (a name or its module): :func:`linattn.companion.figures.contract`."""
    from . import figures

    name = figures.name_of(name)
    if name not in figures.names():
        raise KeyError(f"no presets for figure {name!r}: no figure module of that name; known: "
                       f"{', '.join(figures.names())}")
    return figures.contract(name)


def table(name) -> dict:
    """Figure ``name``'s presets (``{"paper": {...}, "quick": {...}}``; a name or its module); ``{}`` for a figure
    that declares none. KeyError for a name that is no figure."""
    return _contract(name).PRESETS


def has_presets(name: str) -> bool:
    """Whether ``name`` is a figure with a non-empty paper preset (a reader's own notebook is not)."""
    from . import figures

    return name in figures.names() and bool(table(name).get("paper"))


def knob_help(name) -> dict[str, str]:
    """What each knob of figure ``name`` means: a run setting's own help (its declaration,
    :data:`linattn.config.SETTINGS`), the help of knobs several figures share (``common.preset_blocks.HELP``), then the
    figure's own ``HELP``."""
    from ..config import SETTINGS
    from .figures.common.preset_blocks import HELP

    return {**{k: s.describe() for k, s in SETTINGS.items()}, **HELP, **_contract(name).HELP}


def settings(name, preset: str = "paper", *, runs: dict | None = None, **overrides) -> dict:
    """A deep copy of figure ``name``'s ``preset`` (a name or its module) with ``overrides`` applied.

    Overrides whose value is None are ignored. A dict given for a dict setting (a nested run ``attn_m``, or
    ``epoch_extended``) updates it key by key, so ``attn_m={"lr": 0.1}`` changes one setting of that run. An unknown
    figure, preset or key raises (a typo never silently falls back to a default). ``runs`` holds run-level settings
    (``init``, ``lr``, ``epoch``, ...) for figures whose preset nests its runs in sub-dicts (``attn_m``,
    ``attn_s``): see :func:`apply_to_runs`.
    """
    from . import figures

    presets = table(name)
    name = figures.name_of(name)
    if not presets:
        raise KeyError(f"no presets for figure {name!r}")
    if preset not in presets:
        raise KeyError(f"figure {name!r} has no preset {preset!r}; choose from {', '.join(presets)}")
    out = copy.deepcopy(presets[preset])
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in out:
            raise KeyError(f"{key!r} is not a setting of figure {name!r} (settings: {', '.join(out)})")
        if isinstance(value, dict) and isinstance(out[key], dict):
            out[key].update(copy.deepcopy(value))
        else:
            out[key] = copy.deepcopy(value)
    out = apply_to_runs(out, runs or {})
    check_model(name, out)
    return out


def check_model(name, s: dict) -> None:
    """Refuse settings ``s`` of figure ``name`` whose ``model`` (or a nested run's) is not the one its page is about:
    a page's theory, plot and prose are of one model (ATTN_M's closed forms, ATTN_S's saddles), so the model is a
    setting a reader sees but cannot change there (:class:`linattn.errors.ConfigError` naming the setting)."""
    from ..config import ConfigError
    from ..errors import named
    from . import figures

    paper, name = table(name)["paper"], figures.name_of(name)
    places = [(None, paper, s)] + [(k, v, s.get(k)) for k, v in paper.items() if isinstance(v, dict) and "model" in v]
    for run, fixed, given in places:
        if "model" in fixed and isinstance(given, dict) and given.get("model", fixed["model"]) != fixed["model"]:
            field = "model" if run is None else f"{run}.model"
            subject = f"figure {name}" if run is None else f"the {run} run of figure {name}"
            raise ConfigError(f"{named(field, given['model'])}: {subject} is {fixed['model']} (the page's theory, "
                              f"plot and text are that model's), so {named(field)} stays {fixed['model']!r}",
                              field=field, value=given["model"])


def apply_to_runs(s: dict, runs: dict) -> dict:
    """``s`` with the run-level settings ``runs`` (:class:`linattn.config.RunConfig` names) set in every run it
    holds: each sub-dict that names a ``model`` (``attn_m``, ``attn_s``), or ``s`` itself when it has none.
    None values are ignored; a name that is not a RunConfig field raises."""
    from ..config import RunConfig

    valid = set(RunConfig.field_names())
    for key in runs:
        if key not in valid:
            raise KeyError(f"{key!r} is not a run setting (RunConfig fields: {', '.join(sorted(valid))})")
    for target in nested(s).values():
        target.update({k: copy.deepcopy(v) for k, v in runs.items() if v is not None})
    return s


def nested_runs(name) -> tuple[str, ...]:
    """The keys of the runs figure ``name`` nests in sub-dicts (``("attn_m", "attn_s")``), else ``()``."""
    return tuple(k for k in nested(table(name).get("paper", {})) if k is not None)


def resolve(name, preset: str, overrides: dict | None = None) -> dict:
    """Every setting of figure ``name`` at ``preset`` with a reader's ``overrides`` (``linattn figures --param``):
    the values the runner gives the notebook's parameters cell. An override that is a setting of the figure
    replaces it (a dict updates it); for a figure with nested runs, a run-level setting (``lr=0.1``) goes to every
    nested run."""
    own = table(name)[preset]
    overrides = overrides or {}
    top = {k: v for k, v in overrides.items() if k in own}
    runs = {k: v for k, v in overrides.items() if k not in own}
    return settings(name, preset, runs=runs, **top)


def parameters(name, namespace: dict) -> dict:
    """Figure ``name``'s settings as its notebook's parameters cell (and any values papermill injected) left them in
    ``namespace`` (the notebook's ``globals()``): ``{key: namespace[key]}`` for every setting of the figure, deep
    copied, and checked like ``settings`` (a page's model is fixed: ``check_model``). How a notebook run by hand,
    without the runner, resolves its settings, once (``frame.build``; the runner hands its kernel a
    :class:`Resolved` instead)."""
    out = {k: copy.deepcopy(namespace[k]) for k in table(name)["paper"]}
    check_model(name, out)
    return out


def horizons(s: dict):
    """The step a figure's runs are carried on to, from its settings ``s``: ``max(epoch, epoch_extended)``; for a
    per-rank ``epoch_extended`` (``{rank: steps}``) a dict ``{rank: steps}`` over ``s["ranks"]``, a rank it does not
    list taking its largest value."""
    ext = s["epoch_extended"]
    if isinstance(ext, dict):
        ext = {int(R): steps for R, steps in ext.items()}  # papermill writes a dict's keys as text (a re-run by hand)
        return {R: max(s["epoch"], int(ext.get(R, max(ext.values())))) for R in s["ranks"]}
    return max(s["epoch"], int(ext))


def is_published(name, s: dict) -> bool:
    """Whether the settings ``s`` of figure ``name`` are the published ones (its paper preset), horizons that only
    lengthen the runs (``epoch_extended``, ``epoch_streams``) and ``snapshot_every`` aside: only then does a page
    set its run beside the published figure."""
    ignore = ("epoch_extended", "epoch_streams", "snapshot_every")
    paper = table(name)["paper"]
    return {k: v for k, v in s.items() if k not in ignore} == {k: v for k, v in paper.items() if k not in ignore}


# ---------------------------------------------------------------- the runs a figure trains (to check overrides)

def run_configs(name, preset: str = "quick", overrides: dict | None = None) -> list:
    """The :class:`linattn.config.RunConfig` of every run figure ``name`` trains at ``preset`` with a reader's
    ``overrides`` (its notebook's parameters, as ``linattn figures --param`` gives them), not validated: its module's
    ``runs(S)`` of the settings the runner would give it (:func:`resolve`; overrides that are neither a setting nor a
    run setting, such as drawing options, make no run). A figure without ``runs`` trains nothing: ``[]``."""
    from ..config import RunConfig

    runs = _contract(name).runs
    if runs is None:
        return []
    fields, own = set(RunConfig.field_names()), table(name).get(preset, {})
    S = resolve(name, preset, {k: v for k, v in (overrides or {}).items() if k in own or k in fields})
    return _declared(runs(S))


def _check_values(overrides: dict) -> None:
    """Each override that is a run setting (or a nested run's, ``attn_m={"lr": …}``) against that setting's own
    type and range (:data:`linattn.config.SETTINGS`), before a figure's ``runs(S)`` computes with it (a negative
    horizon would reach a logarithm)."""
    from ..config import SETTINGS

    for key, value in overrides.items():
        for k, v in (value.items() if isinstance(value, dict) else [(key, value)]):
            if k in SETTINGS:
                SETTINGS[k].check_type(v)
                SETTINGS[k].check_value(v)


def _param_words(name: str, *value) -> str:
    """A figure's setting as ``linattn figures`` names it: ``--param model='attnS'``, or the bare name."""
    return f"--param {name}={value[0]!r}" if value else name


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Figure ``name``'s settings resolved once for a build at ``preset`` with a reader's ``overrides``: what the runner
    hands the notebook's kernel as data (:func:`prepare`).

    ``settings``: every setting, the overrides applied and checked (:func:`resolve`); ``runs``: its module's
    ``runs(settings)``, ``{label: RunConfig or FromRun}``, each run's settings validated
    (:func:`linattn.training.plan.plan`), or None for a figure that trains nothing."""

    name: str
    preset: str
    overrides: dict
    settings: dict
    runs: dict | None = None

    def save(self, path) -> Path:
        """Write the record to ``path`` for the kernel (:func:`given` reads it back): a pickle, so that every value
        keeps its type (a dict's int keys, a tuple, a RunConfig) and its validation."""
        path = Path(path)
        path.write_bytes(pickle.dumps(self))
        return path


#: the name under which the runner gives a notebook the path of its :class:`Resolved` (an injected parameter)
GIVEN = "resolved"


def given(namespace: dict) -> Resolved | None:
    """The :class:`Resolved` the runner gave a notebook (``namespace``: its ``globals()``), or None where it was run
    without the runner (its parameters cell then holds the values: :func:`parameters`)."""
    path = namespace.get(GIVEN)
    return None if path is None else pickle.loads(Path(path).read_bytes())  # the runner's own file, in its stage


def prepare(name: str, preset: str, overrides: dict | None = None) -> Resolved:
    """Figure ``name``'s settings at ``preset`` with a reader's ``overrides``, resolved and checked once, and the runs
    they make (:class:`Resolved`): each run planned (:func:`linattn.training.plan.plan`: bounds, draws, memory), or,
    for a figure that trains nothing, the weights it draws checked (bounds, memory), and the figure's own ``check(S)``
    where it declares one (a schematic's size). Overrides that are neither a setting nor a run setting are left out.
    Raises their ConfigError, worded for the reader's overrides where there are some (:func:`check_overrides`)."""
    from ..config import ConfigError

    overrides = dict(overrides or {})
    try:
        return _prepared(name, preset, overrides)
    except ConfigError as e:
        if not overrides:
            raise
        if str(e.field).endswith("model") and e.field in {*overrides, *(f"{k}.model" for k in overrides)}:
            # check_model: the page's own model
            raise ConfigError(f"{name}: {e.words(_param_words)}", field=e.field, value=e.value) from None
        raise ConfigError(f"{name}: {_given(overrides, e.field)} {_what(name)}: {e}", field=e.field,
                          value=e.value) from None
    except (TypeError, ValueError) as e:  # e.g. a seed that is not a number
        if not overrides:
            raise
        raise ConfigError(f"{name}: {_given(overrides, None)} {_what(name)}: not a valid value ({e})") from None


def _prepared(name: str, preset: str, overrides: dict) -> Resolved:
    """The body of :func:`prepare`: its checks, in the order a reader's values meet them."""
    from ..config import RunConfig
    from ..training.memory import check_weights_memory
    from ..training.plan import plan

    _check_values(overrides)
    fields, own = set(RunConfig.field_names()), table(name)[preset]
    S = resolve(name, preset, {k: v for k, v in overrides.items() if k in own or k in fields})
    figure = _contract(name)
    if figure.runs is None:
        drawn = {k: v for k, v in S.items() if k in fields}
        if drawn:
            check_weights_memory(RunConfig(**drawn).validate())
    if figure.check is not None:  # what the figure itself cannot show (a schematic too large to draw)
        figure.check(S)
    runs = None if figure.runs is None else figure.runs(S)
    for cfg in _declared(runs or {}):
        plan(cfg)
    return Resolved(name, preset, overrides, S, runs)


def for_build(name: str, params: dict) -> Resolved | None:
    """:func:`prepare` of figure ``name`` for a build's ``params`` (``preset`` and a reader's overrides); None for a
    notebook without presets (a report, a reader's own), which is given ``params`` as they are."""
    if not has_presets(name):
        return None
    return prepare(name, params["preset"], {k: v for k, v in params.items() if k != "preset"})


def check_overrides(name: str, preset: str, overrides: dict) -> None:
    """Refuse a reader's ``overrides`` of figure ``name`` that would give a run :func:`linattn.training.plan.plan`
    refuses (its settings, the reference's draws, its memory), or, for a figure that trains nothing, weights too large
    or of invalid settings, before anything runs (:class:`linattn.errors.ConfigError`: one line naming the figure, the
    parameters and the reason; :func:`prepare`). The overrides are applied together, as the runner gives them, so their
    order does not matter; the line names the parameter the reason is about where it is one of them, else all of them.
    Notebooks without presets (a reader's own) are not checked."""
    if overrides and has_presets(name):
        prepare(name, preset, overrides)


def _what(name: str) -> str:
    """What a refused override gives: an invalid run, or (a figure that trains nothing) settings it cannot use."""
    return "an invalid run" if _contract(name).runs is not None else "settings the figure cannot use"


def _given(overrides: dict, field) -> str:
    """The overrides a refusal is about, with their verb: the one named ``field`` where there is one, else every
    one (the reason may come from their combination, as ``ranks`` beyond a smaller ``in_dim``)."""
    shown = {field: overrides[field]} if field in overrides else overrides
    words = " ".join(f"--param {k}={v!r}" for k, v in shown.items())
    return f"{words} gives" if len(shown) == 1 else f"{words} give"

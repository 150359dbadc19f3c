"""Importing linattn, checking a run's settings and every refusal of the CLI import no torch (nor scipy, matplotlib,
dask): torch is imported where a model, an engine or a draw runs. Each check runs in a fresh interpreter, which
reports the heavy modules it holds at exit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "scipy", "matplotlib", "dask", "xarray")

# Prints the heavy modules loaded as one JSON line on stderr at exit, whatever the code after it did (a CLI refusal
# ends in SystemExit).
_REPORT = """import atexit, json, sys
atexit.register(lambda: print("LOADED " + json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr))
""" % (HEAVY,)


def _probe(code: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``code`` (``sys.argv[1:]`` = ``args``) in a fresh interpreter: (its result, the heavy modules it held)."""
    done = subprocess.run([sys.executable, "-c", _REPORT + textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("LOADED ")]
    assert lines, done.stderr
    return done, json.loads(lines[-1][len("LOADED "):])


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    return _probe("import sys\nfrom linattn.cli import main\nsys.exit(main(sys.argv[1:]))", *args)


def test_the_probe_sees_a_heavy_import():
    """The check itself can fail: a run imports torch, and the probe reports it."""
    done, loaded = _probe("""
        import linattn
        cfg = linattn.RunConfig(in_dim=2, seq_len=4, trainset_size=10, epoch=2, draws="streams")
        print(len(linattn.run(cfg, progress=False).history.train_loss))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2" and "torch" in loaded


def test_import_linattn_and_checking_settings_import_no_torch():
    done, loaded = _probe("""
        import linattn, linattn.config, linattn.cli
        from linattn import RunConfig, ConfigError, objectives
        RunConfig().validate()
        RunConfig(trainset_size=None).validate()
        RunConfig(softmax=True, engine="softmax").validate()
        for bad in (dict(seed=-1), dict(engine="softmax"), dict(rank=9), dict(device="cpu:1")):
            try:
                RunConfig(**bad).validate()
            except ConfigError:
                pass
            else:
                raise AssertionError(bad)
        assert objectives.engine_choices() == ("auto", "exact", "population", "softmax", "autograd")
        assert objectives.device_for("auto", "exact") == "cpu"
        linattn.cli.build_parser().format_help()
        print(sorted(dir(linattn)) == sorted(set(dir(linattn))))
    """)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert loaded == [], f"importing linattn or checking settings imported {loaded}"


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["train", "--help"], ["figures", "--help"]])
def test_help_and_version_import_no_torch(args):
    done, loaded = _cli(*args)
    assert done.returncode == 0 and done.stdout, done.stderr
    assert loaded == [], f"linattn {' '.join(args)} imported {loaded}"


@pytest.mark.parametrize("args, says", [
    (["train", "--seed", "-1"], "linattn train: error: --seed must be an integer in [0, 2^32), got -1"),
    (["train", "--engine", "softmax"], "linattn train: error: --engine 'softmax' covers softmax attention only"),
    (["train", "--trainset_size", "100000000000000"], "linattn train: error: this run needs about"),
    (["sweep", "--grid", "seed=-1", "--dry-run"], "linattn sweep: error: cell seed=-1: --seed must be"),
    (["figures", "--only", "no_such_figure"], "linattn figures: error: unknown figure(s): no_such_figure"),
    (["notebook", "no_such_figure"], "linattn notebook: error: unknown figure 'no_such_figure'"),
])
def test_a_refusal_exits_2_with_its_line_and_imports_no_torch(args, says):
    done, loaded = _cli(*args)
    errors = [ln for ln in done.stderr.splitlines() if not ln.startswith("LOADED ")]
    assert done.returncode == 2 and len(errors) == 1 and errors[0].startswith(says), done.stderr
    assert "torch" not in loaded and "scipy" not in loaded, f"linattn {' '.join(args)} imported {loaded}"


def test_every_public_name_resolves_after_a_lazy_import():
    done, loaded = _probe("""
        import importlib, linattn
        for name in linattn.__all__:
            value = getattr(linattn, name)
            assert value is not None, name
            if name in linattn._SUBMODULES:  # a module given as a name: the module where it lives
                assert value is importlib.import_module("linattn." + linattn._SUBMODULES[name]), name
        from linattn import run, RunResult, TrainingDiverged, build_model, objectives
        assert run is importlib.import_module("linattn.training.experiment").run
        assert objectives.Exact is importlib.import_module("linattn.objectives.exact").Exact
        assert objectives.load("exact") is objectives.Exact and objectives.get("exact").name == "exact"
        try:
            linattn.no_such_name
        except AttributeError as e:
            assert "no_such_name" in str(e)
        else:
            raise AssertionError("linattn.no_such_name resolved")
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_figure_modules_import_no_scipy_matplotlib_or_dask():
    """A figure kernel imports what it uses: importing a figure module (not computing it) brings no heavy
    plotting, solver or scheduler library; phase_diagram builds its runs with torch at import."""
    done, loaded = _probe("""
        import importlib, pkgutil, linattn.companion.figures as figures
        for info in pkgutil.iter_modules(figures.__path__):
            importlib.import_module(f"linattn.companion.figures.{info.name}")
    """)
    assert done.returncode == 0, done.stderr
    assert not {"scipy", "matplotlib", "dask", "xarray"} & set(loaded), loaded


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["train", "--seed", "-1"], ["figures", "--help"]])
def test_the_parser_and_refusals_leave_the_figure_runner_unimported(args):
    """The figures and notebook commands' options come from a small module; the runner and what it imports
    (notebooks, presets, the run store's records) load only when one of those commands runs."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""\
        import atexit, sys
        atexit.register(lambda: print("RUNNER", "linattn.companion.runner.schedule" in sys.modules, file=sys.stderr))
        from linattn.cli import main
        sys.exit(main(sys.argv[1:]))
        """), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 2) and "RUNNER False" in done.stderr, done.stderr


def test_the_figures_command_still_reaches_the_runner():
    done = subprocess.run([sys.executable, "-m", "linattn", "figures", "--jobs", "0"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stderr == "linattn figures: error: --jobs must be a positive integer\n"


_WRITE_A_DATASET = """
    import sys
    import numpy as np, xarray as xr
    from linattn.companion.output import FigureOutput
    {before}
    ds = xr.Dataset({{"loss": ("step", np.array([1.0, 0.5, np.nan]))}}, coords={{"step": [0, 1, 2]}})
    path = FigureOutput("demo", sys.argv[1]).save_dataset(ds)
    back = xr.open_dataset(path.with_suffix(".nc"), engine="h5netcdf")
    xr.testing.assert_identical(back.load(), ds)
    print(sorted(name for name in ("distributed", "dask.distributed") if name in sys.modules),
          [name for name, module in sys.modules.items() if module is None and "distributed" in name])
"""


def test_writing_a_figure_dataset_imports_no_dask_distributed(tmp_path):
    """xarray's writer asks which Dask scheduler runs, which would import dask.distributed: a page without a cluster
    writes its NetCDF (read back identical) without it, and leaves no blocked entry in sys.modules."""
    done, loaded = _probe(_WRITE_A_DATASET.format(before=""), str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []" and "xarray" in loaded


def test_a_dataset_written_with_a_cluster_about_keeps_dask_distributed(tmp_path):
    """Where dask.distributed is imported (a page with a cluster), writing a dataset leaves it as it was."""
    done, _ = _probe(_WRITE_A_DATASET.format(before="import dask.distributed"), str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['dask.distributed', 'distributed'] []"

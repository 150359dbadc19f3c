"""The figure runner: caching, failure isolation, report ordering, the cite cell, sources in the cache key, bad
input refused up front (--param values as runs, --out), the notebook command, and the output/presets modules."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml

import linattn
from linattn import records
from linattn.companion import figures as registry
from linattn.companion import presets
from linattn.companion.output import FigureOutput, NumbersTable, figures_root, median_and_range, number_row
from linattn.companion.runner import cachekey, citation, execute, figure_commands, notebooks, schedule, sources

FRONT = textwrap.dedent("""\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
    kernelspec:
      display_name: Python 3
      name: python3
    {extra}---
    """)


def notebook(body: str, extra: str = "") -> str:
    """A tiny MyST notebook writing one file into <out_dir>/<name>/ (no torch: kernels start fast)."""
    return FRONT.format(extra=extra) + textwrap.dedent("""
        # test figure

        ```{code-cell} ipython3
        :tags: [parameters]

        preset = "quick"
        out_dir = None
        ```

        ```{code-cell} ipython3
        import os, time
        from pathlib import Path
        NAME = "%NAME%"
        root = Path(out_dir)
        (root / NAME).mkdir(parents=True, exist_ok=True)
        """) + textwrap.dedent(body) + "\n```\n"


def make_src(tmp_path, bodies: dict[str, str], extra: dict[str, str] | None = None) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name, body in bodies.items():
        text = notebook(body, (extra or {}).get(name, "")).replace("%NAME%", name)
        (src / f"{name}.md").write_text(text)
    return src


WRITE = """(root / NAME / "out.txt").write_text(f"{preset} {time.time_ns()}")\n"""


@pytest.fixture(autouse=True)
def pinned_sources(monkeypatch):
    """A fixed hash of the linattn sources: edits to the package while the suite runs cannot flip a cache test."""
    pin_sources(monkeypatch, "pinned")


def pin_sources(monkeypatch, value: str) -> None:
    """The hash of the linattn sources, wherever the runner computes a cache key, set to ``value``."""
    for module in (schedule, cachekey):
        monkeypatch.setattr(module, "source_hash", lambda cells: value)


@pytest.mark.slow
def test_each_figure_reports_the_cpu_its_kernel_used(tmp_path):
    """The runner charges a figure the CPU of its kernel (and what the kernel started): a notebook that computes for
    two seconds costs most of that more than one that sleeps for a second, in the result and in the figure's run record
    (two, not one: two kernels' own start-up CPU differs by a few tenths of a second on a busy machine)."""
    burn = WRITE + "t = time.process_time()\nwhile time.process_time() - t < 2.0:\n    pass\n"
    sleep = WRITE + "time.sleep(1.0)\n"
    src = make_src(tmp_path, {"burns": burn, "sleeps": sleep})
    out = tmp_path / "out"
    res = {r.name: r for r in schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)}
    assert res["burns"].cpu_seconds - res["sleeps"].cpu_seconds > 0.8
    assert res["sleeps"].seconds > 1.0 and res["sleeps"].cpu_seconds > 0  # the kernel's own start-up counts
    recorded = json.loads((out / "burns" / cachekey.RUN_INFO).read_text())
    assert recorded["cpu_seconds"] == pytest.approx(res["burns"].cpu_seconds, abs=0.06)


@pytest.mark.slow
def test_a_kernel_keeps_no_history_and_is_stopped_once_its_cells_are_done(tmp_path):
    """The kernel runs without IPython's history database, and after its last cell it is stopped at once (no exit
    handlers, no teardown of its libraries, which would cost CPU for nothing) and is gone when the figure is done;
    what its cells wrote is all there."""
    body = WRITE + textwrap.dedent("""\
        import atexit
        atexit.register(lambda: (root / NAME / "exited.txt").write_text("orderly exit"))
        (root / NAME / "kernel.txt").write_text(f"{os.getpid()} {get_ipython().history_manager.enabled}")
        """)
    src = make_src(tmp_path, {"one": body})
    out = tmp_path / "out"
    res = schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)
    assert [r.status for r in res] == ["ran"]
    pid, history = (out / "one" / "kernel.txt").read_text().split()
    assert history == "False" and (out / "one" / "out.txt").read_text().startswith("quick ")
    assert not (out / "one" / "exited.txt").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)


@pytest.mark.slow
def test_cache_skips_unchanged_and_reruns_after_source_change(tmp_path, monkeypatch):
    src = make_src(tmp_path, {"one": WRITE})
    out = tmp_path / "out"
    res = schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)
    assert [r.status for r in res] == ["ran"]
    first = (out / "one" / "out.txt").read_text()
    nb = nbformat.read(out / "one.ipynb", as_version=4)
    assert "Cite this figure" in nb.cells[-1].source and "fig-one" in nb.cells[-1].source

    res = schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)
    assert [r.status for r in res] == ["cached"]
    assert (out / "one" / "out.txt").read_text() == first

    # a change anywhere in the linattn sources invalidates every figure
    pin_sources(monkeypatch, "changed-source")
    res = schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)
    assert [r.status for r in res] == ["ran"]
    assert (out / "one" / "out.txt").read_text() != first

    # as does a new version of a library that computes or draws
    real = records.library_versions()
    monkeypatch.setattr(schedule, "library_versions", lambda: {**real, "numpy": "0.0-other"})
    assert schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)[0].status == "ran"

    # as does a change of preset, and --force
    assert schedule.run_figures(src=src, out=out, jobs=1, preset="paper", progress=False)[0].status == "ran"
    assert (out / "one" / "out.txt").read_text().startswith("paper ")
    assert schedule.run_figures(src=src, out=out, jobs=1, preset="paper", progress=False)[0].status == "cached"
    assert schedule.run_figures(src=src, out=out, jobs=1, preset="paper", force=True,
                               progress=False)[0].status == "ran"


@pytest.mark.slow
def test_page_gets_a_badge_a_run_record_and_a_runnable_copy(tmp_path):
    src = make_src(tmp_path, {"one": WRITE})
    out = tmp_path / "out"
    schedule.run_figures(src=src, out=out, jobs=1, preset="quick", progress=False)
    nb = nbformat.read(out / "one.ipynb", as_version=4)
    badge = nb.cells[1].source  # right under the title cell
    assert nb.cells[0].source.startswith("# test figure") and "quick preset" in badge and "run 20" in badge
    info = cachekey.run_info(out, "one")
    assert info["preset"] == "quick" and info["overrides"] == {}
    standalone = nbformat.read(out / "one" / "one.ipynb", as_version=4)  # offered as a download on the page
    params = next(c for c in standalone.cells if "parameters" in c.metadata.get("tags", []))
    assert "preset = 'quick'" in params.source and "injected-parameters" not in str(standalone)


@pytest.mark.slow
def test_overrides_are_checked_injected_and_shown(tmp_path):
    body = WRITE + "(root / NAME / 'seeds.txt').write_text(repr(seeds))\n"
    src = make_src(tmp_path, {"one": body})
    text = (src / "one.md").read_text().replace('out_dir = None', 'seeds: list = None  # which seeds\nout_dir = None')
    (src / "one.md").write_text(text)
    out = tmp_path / "out"
    with pytest.raises(notebooks.ParameterError, match="no parameter 'seedz'.*seeds \\(list"):
        schedule.run_figures(src=src, out=out, preset="quick", overrides={"seedz": [3]}, progress=False)
    with pytest.raises(notebooks.ParameterError, match="seeds must be a list"):
        schedule.run_figures(src=src, out=out, preset="quick", overrides={"seeds": "three"}, progress=False)
    assert not out.exists() or not any(out.iterdir())  # refused before any work
    res = schedule.run_figures(src=src, out=out, preset="quick", overrides={"seeds": [3]}, jobs=1, progress=False)
    assert res[0].status == "ran" and (out / "one" / "seeds.txt").read_text() == "[3]"
    assert cachekey.run_info(out, "one")["overrides"] == {"seeds": [3]}
    assert "seeds = [3]" in nbformat.read(out / "one.ipynb", as_version=4).cells[1].source
    # the same overrides again: cached; without them: runs again
    assert schedule.run_figures(src=src, out=out, preset="quick", overrides={"seeds": [3]},
                               progress=False)[0].status == "cached"
    assert schedule.run_figures(src=src, out=out, preset="quick", progress=False)[0].status == "ran"


@pytest.mark.slow
def test_report_reruns_when_a_figure_it_reads_changes(tmp_path):
    src = make_src(tmp_path, {"fig": WRITE + "(root / NAME / 'numbers.json').write_text(str(seed))\n",
                              "summary": WRITE},
                   extra={"summary": "linattn:\n  report: true\n"})
    text = (src / "fig.md").read_text().replace('out_dir = None', 'seed = 1\nout_dir = None')
    (src / "fig.md").write_text(text)
    out = tmp_path / "out"
    run = lambda **kw: {r.name: r.status for r in schedule.run_figures(src=src, out=out, preset="quick", jobs=1,
                                                                         progress=False, **kw)}
    assert run() == {"fig": "ran", "summary": "ran"}
    assert run() == {"fig": "cached", "summary": "cached"}
    assert run(only=["fig"], overrides={"seed": 2}) == {"fig": "ran"}  # new numbers.json
    assert run(only=["summary"]) == {"summary": "ran"}


@pytest.mark.slow
def test_source_hash_follows_what_a_notebook_imports(tmp_path):
    """A figure's key covers the modules it computes with (here theory, through linattn/__init__), and not the CLI,
    the runner or the book builder: editing those re-runs nothing."""
    pkg = tmp_path / "linattn"
    shutil.copytree(Path(linattn.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cells = ["from linattn import theory\nfrom linattn.companion.output import FigureOutput"]
    before = sources.source_hash(cells, pkg)
    for untouched in ("cli/__init__.py", "companion/runner/schedule.py", "companion/book.py",
                      "companion/runner/sources.py"):
        (pkg / untouched).write_text((pkg / untouched).read_text() + "\n# edited\n")
        assert sources.source_hash(cells, pkg) == before, untouched
    for followed in ("theory.py", "objectives/exact.py", "records.py"):  # records: imported by the output module
        (pkg / followed).write_text((pkg / followed).read_text() + "\n# edited\n")
        assert sources.source_hash(cells, pkg) != before, followed
        before = sources.source_hash(cells, pkg)


def test_imports_inside_functions_are_followed(tmp_path):
    pkg = tmp_path / "linattn"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text("")
    (pkg / "d.py").write_text("")
    found = {p.relative_to(pkg).as_posix() for p in sources.closure({"linattn.a"}, pkg)}
    assert found == {"__init__.py", "a.py", "sub/__init__.py", "sub/b.py", "c.py"}


#: The runner's own modules (scheduling, executing, publishing, cache keys, the figure commands and their arguments,
#: interrupts, citation), by name wherever they live under linattn/companion/: no figure notebook imports them.
RUNNER_MODULES = ("schedule", "execute", "publish", "cachekey", "sources", "interrupts", "citation", "figure_commands",
                  "figure_args")


def _outside_the_figures(root: Path) -> set[str]:
    """The files (relative to the package ``root``) that no figure may depend on: the CLI, ``__main__``, the book
    builder and the runner's modules. Each must exist: a renamed or moved one fails here, not silently."""
    companion = root / "companion"
    found = {}
    for name in (*RUNNER_MODULES, "book"):
        paths = sorted(companion.rglob(f"{name}.py"))
        assert len(paths) == 1, f"companion module {name}.py: expected one, found {paths}"
        found[name] = paths[0]
    cli = sorted((root / "cli").rglob("*.py")) if (root / "cli").is_dir() else [root / "cli.py"]
    files = [*found.values(), *cli, root / "__main__.py"]
    missing = [f for f in files if not f.is_file()]
    assert not missing, f"no longer in the package: {missing}"
    return {f.relative_to(root).as_posix() for f in files}


@pytest.mark.slow
def test_no_figure_depends_on_the_cli_the_runner_or_the_book_builder():
    """So touching the CLI (or the runner, or the book builder) re-executes no notebook."""
    root = Path(linattn.__file__).parent
    outside = _outside_the_figures(root)
    assert {"__main__.py", "companion/book.py", "cli/__init__.py"} <= outside
    for name, path in notebooks.discover().items():
        nb = notebooks.read(path)
        used = {p.relative_to(root).as_posix()
                for p in sources.closure(set().union(*map(sources.imported_names, sources.notebook_sources(nb))))}
        assert "companion/output.py" in used, name  # every figure writes through FigureOutput
        assert not used & outside, (name, sorted(used & outside))


def traceback_notebooks(text: str) -> dict[str, Path]:
    """``{figure: traceback notebook}`` from the runner's FAILED lines."""
    return {m[1]: Path(m[2]) for m in re.finditer(r"FAILED\s+(\S+)\s.*; traceback in (\S+)", text)}


def raised(path: Path) -> list[str]:
    """The exception names recorded in the outputs of an executed notebook."""
    nb = nbformat.read(path, as_version=4)
    return [o.get("ename") for c in nb.cells for o in c.get("outputs", []) if o.get("ename")]


@pytest.mark.slow
def test_broken_notebook_fails_alone_and_leaves_the_published_figure_as_it_was(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # nothing of a failed figure may stay there
    (tmp_path / "tmp").mkdir()
    src = make_src(tmp_path, {"good": WRITE, "bad": WRITE, "half": WRITE})
    out = tmp_path / "out"
    assert all(r.status == "ran" for r in schedule.run_figures(src=src, out=out, jobs=2, progress=False))
    old = {n: (out / n / "out.txt").read_text() for n in ("bad", "half")}
    # break two notebooks after a successful run: "bad" fails before writing anything, "half" after its first file
    (src / "bad.md").write_text((src / "bad.md").read_text().replace(
        WRITE.strip(), 'raise ZeroDivisionError("deliberately broken")'))
    (src / "half.md").write_text((src / "half.md").read_text().replace(
        WRITE.strip(), WRITE.strip() + '\nraise KeyError("after its first output")'))
    from linattn.cli import main

    code = main(["figures", "--src", str(src), "--out", str(out), "--jobs", "2", "--force"])
    assert code == 1
    printed = capsys.readouterr()
    assert "1 ran, 0 up to date, 2 failed" in printed.out
    everything = printed.out + printed.err
    assert everything.count("FAILED") == 2  # one line per failed figure, no repeat in the summary
    assert "ZeroDivisionError: deliberately broken" in printed.err and "KeyError" in printed.err
    notebooks_at = traceback_notebooks(printed.err)
    assert notebooks_at == {"bad": out / "bad.failed.ipynb", "half": out / "half.failed.ipynb"}
    assert raised(notebooks_at["bad"]) == ["ZeroDivisionError"] and raised(notebooks_at["half"]) == ["KeyError"]
    # the published figures are the old ones, whole: nothing the failed runs wrote is in --out or the temp folder
    for name in ("bad", "half"):
        assert (out / name / "out.txt").read_text() == old[name] and (out / f"{name}.ipynb").is_file()
    assert not list(out.glob(".staging-*")) and not list((tmp_path / "tmp").glob("linattn-*"))
    assert sorted(p.name for p in (out / ".previous").iterdir()) == ["good", "good.ipynb"]  # replaced by its new run
    # the old figures are no longer current for the changed notebooks: they run again, the good one is cached
    assert [n for n, state, _ in schedule.list_figures(src=src, out=out) if state == "current"] == ["good"]
    res = {r.name: r.status for r in schedule.run_figures(src=src, out=out, jobs=2, progress=False)}
    assert res == {"bad": "failed", "good": "cached", "half": "failed"}


@pytest.mark.slow
def test_a_figure_failing_in_a_new_out_folder_leaves_only_its_traceback_notebook(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    src = make_src(tmp_path, {"bad": WRITE + 'raise ZeroDivisionError("deliberately broken")\n'})
    out = tmp_path / "new" / "out"
    from linattn.cli import main

    assert main(["figures", "--src", str(src), "--out", str(out), "--jobs", "1"]) == 1
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count("FAILED") == 1 and "0 ran, 0 up to date, 1 failed" in printed.out
    assert sorted(p.name for p in out.iterdir() if p.name != ".locks") == ["bad.failed.ipynb"]
    assert raised(traceback_notebooks(printed.err)["bad"]) == ["ZeroDivisionError"]
    assert not list(tmp_path.glob("linattn-*"))


@pytest.mark.slow
def test_a_notebook_that_prints_a_warning_fails_and_is_never_cached(tmp_path):
    """A library warning printed into a cell's output would show on the page: the figure fails with the warning as
    its error, gets no cache key, and runs again next time."""
    noisy = WRITE + 'import warnings\nwarnings.warn("Port 8787 is already in use", UserWarning)\n'
    src = make_src(tmp_path, {"noisy": noisy, "quiet": WRITE})
    out = tmp_path / "out"
    res = {r.name: r for r in schedule.run_figures(src=src, out=out, jobs=1, progress=False)}
    assert res["quiet"].status == "ran" and res["noisy"].status == "failed"
    assert "PrintedWarning" in res["noisy"].error and "Port 8787 is already in use" in res["noisy"].error
    assert not (out / "noisy" / cachekey.CACHE_KEY).exists() and not (out / "noisy.ipynb").exists()
    again = {r.name: r.status for r in schedule.run_figures(src=src, out=out, jobs=1, progress=False)}
    assert again == {"noisy": "failed", "quiet": "cached"}


@pytest.mark.slow
def test_a_known_fallback_is_reported_on_the_figures_line_not_failed(tmp_path, capsys):
    """An engine's documented slower path (no C compiler: KnownFallback) is said once on the runner's line and in
    the figure's provenance, and is off the page; a figure that also prints another warning still fails."""
    fallback = WRITE + textwrap.dedent("""\
        import json, warnings
        from linattn.objectives.native import KnownFallback
        (root / NAME / "provenance.json").write_text(json.dumps({"figure": NAME}))
        for _ in range(2):
            warnings.warn("no C compiler here; the slower step", KnownFallback)
        """)
    both = fallback + 'warnings.warn("Port 8787 is already in use", UserWarning)\n'
    src = make_src(tmp_path, {"fallback": fallback, "both": both})
    out = tmp_path / "out"
    from linattn.cli import main

    assert main(["figures", "--src", str(src), "--out", str(out), "--jobs", "1"]) == 1
    printed = capsys.readouterr()
    line = next(ln for ln in printed.out.splitlines() if "fallback  (" in ln)
    assert line.startswith("  done    fallback") and line.count("fallback: no C compiler here; the slower step") == 1
    assert "FAILED  both" in printed.err and "Port 8787" in printed.err
    provenance = json.loads((out / "fallback" / "provenance.json").read_text())
    assert provenance["fallbacks"] == ["no C compiler here; the slower step"]
    assert cachekey.run_info(out, "fallback")["fallbacks"] == provenance["fallbacks"]
    page = nbformat.read(out / "fallback.ipynb", as_version=4)
    assert "KnownFallback" not in json.dumps([cell.get("outputs", []) for cell in page.cells])
    assert (out / "fallback" / cachekey.CACHE_KEY).exists() and not (out / "both" / cachekey.CACHE_KEY).exists()


@pytest.mark.slow
def test_report_notebooks_run_after_the_others(tmp_path):
    slow = "time.sleep(1.0)\n" + WRITE
    report = ("seen = sorted(p.name for p in root.iterdir() if p.is_dir() and (p / 'out.txt').exists())\n"
              "(root / NAME / 'out.txt').write_text(','.join(seen))\n")
    src = make_src(tmp_path, {"a_report": report, "b_slow": slow, "c_slow": slow},
                   extra={"a_report": "linattn:\n  report: true\n"})
    out = tmp_path / "out"
    res = schedule.run_figures(src=src, out=out, jobs=3, progress=False)
    assert [r.name for r in res] == ["b_slow", "c_slow", "a_report"]
    assert (out / "a_report" / "out.txt").read_text() == "b_slow,c_slow"


def test_unknown_only_name_is_an_error(tmp_path):
    src = make_src(tmp_path, {"one": WRITE})
    with pytest.raises(KeyError, match="nope"):
        schedule.run_figures(src=src, out=tmp_path / "out", only=["nope"], progress=False)


@pytest.mark.parametrize("param, message", [
    ("seedz=[3]", "has no parameter 'seedz'; its parameters: .*seeds \\(list"),
    ("seeds=3", "seeds must be a list"),
    ("seeds", "--param expects KEY=VALUE"),
])
def test_figures_param_refusals_are_one_line_exit_2_before_any_work(param, message, tmp_path, capsys):
    from linattn.cli import main
    out = tmp_path / "rerun"
    code = main(["figures", "--only", "fig03a_attns_loss", "--param", param, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("linattn figures: error: ")
    assert re.search(message, err), err
    assert not out.exists()


@pytest.mark.parametrize("figure, param, same_run", [
    ("fig01b_attnm_loss", "seed=-1", dict(seed=-1)),
    ("fig03a_attns_loss", "seeds=[0, -1]", dict(seed=-1)),
    ("fig01b_attnm_loss", "init=-0.01", dict(init=-0.01)),
    ("fig14_icl_iwl", "icl_values=[0.5, 2.0]", dict(icl=2.0)),
    ("fig04_low_rank", "ranks=[1, 9]", dict(rank=9, in_dim=8)),
    ("figA_init_scale", "inits_s=[0.01, 0.0]", dict(init=0.0)),
    ("fig05_softmax", "lr=-1.0", dict(lr=-1.0)),
    ("beyond_population", "trainset_sizes=[None, 1]", dict(trainset_size=1)),
])
def test_figures_param_values_are_validated_as_runs_before_any_work(figure, param, same_run, tmp_path, capsys):
    """A value that gives a run RunConfig.validate refuses is refused up front, with validate's own reason."""
    from linattn.cli import main
    from linattn.config import ConfigError, RunConfig

    with pytest.raises(ConfigError) as reason:
        RunConfig(**same_run).validate()
    out = tmp_path / "rerun"
    code = main(["figures", "--only", figure, "--param", param, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("linattn figures: error: "), err
    key = param.partition("=")[0]
    assert f"{figure}: --param {key}=" in err and str(reason.value) in err
    assert not out.exists()


def test_figures_param_refuses_runs_the_reference_draws_cannot_make(tmp_path, capsys):
    """fig14 sweeps icl; the Dec 2024 era with the authors' draws has icl = 1 only, so that era is refused up front."""
    from linattn.cli import main

    out = tmp_path / "rerun"
    assert main(["figures", "--only", "fig14_icl_iwl", "--param", "init_scheme=dec2024", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fig14_icl_iwl: --param init_scheme=" in err and "icl" in err
    assert not out.exists()


@pytest.mark.parametrize("figure, param, field, model", [
    ("fig14_icl_iwl", "model=attnS", "model", "attnM"),
    ("fig03a_attns_loss", "model=attnM", "model", "attnS"),
    ("fig05_softmax", 'attn_s={"model": "attnM"}', "attn_s.model", "attnS"),
])
def test_a_page_keeps_the_model_it_is_about(figure, param, field, model, tmp_path, capsys):
    """A page's theory and prose are one model's: another model is refused up front, on the CLI and in Python, and the
    same model given again is no change."""
    from linattn.cli import main
    from linattn.config import ConfigError

    out = tmp_path / "rerun"
    assert main(["figures", "--only", figure, "--param", param, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{field} stays '{model}'" in err and f"{figure}: --param {field}=" in err
    assert not out.exists()
    key, _, value = param.partition("=")
    value = yaml.safe_load(value)
    with pytest.raises(ConfigError) as refused:
        presets.settings(figure, "quick", **{key: value})
    assert refused.value.field == field and str(refused.value).startswith(f"{field}=")
    same = {key: {"model": model} if isinstance(value, dict) else model}
    assert presets.settings(figure, "quick", **same) == presets.settings(figure, "quick")


def test_run_configs_are_the_runs_a_figure_trains():
    """Sweeps reach the field they set (in the run they belong to), overrides reach every run, constants hold."""
    quick = {name: presets.table(name) for name in registry.names()}
    runs = presets.run_configs("fig14_icl_iwl", "quick", {"seed": 3})
    assert sorted((c.icl, c.seed) for c in runs) == sorted(
        (icl, 3) for icl in quick["fig14_icl_iwl"]["quick"]["icl_values"])
    seeds = presets.run_configs("fig03a_attns_loss", "quick", {"seeds": [1, 2]})
    assert sorted({c.seed for c in seeds}) == [1, 2]  # each in the window and drawn from linattn's streams
    scale = presets.run_configs("figA_init_scale", "quick", {"lr": 0.5})
    by_model = {m: sorted(c.init for c in scale if c.model == m) for m in ("attnM", "attnS")}
    assert by_model == {"attnM": sorted(quick["figA_init_scale"]["quick"]["inits_m"]),
                        "attnS": sorted(quick["figA_init_scale"]["quick"]["inits_s"])}
    assert {c.lr for c in scale} == {0.5}
    assert {c.softmax for c in presets.run_configs("fig05_softmax", "paper")} == {True}
    own = presets.run_configs("beyond_own_experiment", "quick", {"spectrum": [3.0, 2.0, 1.0]})
    assert {c.epoch for c in own} == {quick["beyond_own_experiment"]["quick"][k] for k in ("epoch", "epoch_more")}
    assert all(c.in_dim == 3 and c.draws == "streams" for c in own)
    assert presets.run_configs("fig01a_attnm_schematic", "paper", {"in_dim": 2}) == []  # draws, trains nothing


def test_every_preset_gives_valid_runs_and_the_tables_name_real_settings():
    from linattn.companion.figures.common.preset_blocks import RUN_KNOBS, SWEEPS
    from linattn.config import RunConfig

    tables = {name: presets.table(name) for name in registry.names() if presets.has_presets(name)}
    for name in tables:
        for preset in ("quick", "paper"):
            runs = presets.run_configs(name, preset)
            table = tables[name][preset]
            assert bool(runs) == ("seeds" in table or "seed" in table), name
            for cfg in runs:
                cfg.validate()
    used = {key for figure in tables.values() for table in figure.values() for key in table}
    for key, sweep in SWEEPS.items():
        assert key in used and sweep.field in RunConfig.field_names(), key
    for name, figure in tables.items():  # every training figure lists every run knob, quick and paper alike
        assert set(figure["quick"]) == set(figure["paper"]), name
        runs = [figure["paper"][k] for k in presets.nested_runs(name)] or (
            [figure["paper"]] if "model" in figure["paper"] and "in_dim" in figure["paper"] else [])
        for run in runs:
            swept = {sweep.field for key, sweep in SWEEPS.items() if key in figure["paper"]}
            wanted = set(RUN_KNOBS) - swept - ({"rank"} if run["model"] != "attnS" else set())
            assert wanted <= set(run), (name, wanted - set(run))


def test_parameters_cells_are_written_from_the_presets_table():
    """One source: each figure's parameters cell is :func:`notebooks.parameters_source` of its paper preset, so
    every setting is a knob with its paper value (``python -m linattn.companion.runner.notebooks --sync`` rewrites
    them)."""
    for name, path in notebooks.discover().items():
        if not presets.has_presets(name):
            continue
        cell = notebooks.parameters_cell(notebooks.read(path)).source
        assert cell == notebooks.parameters_source(name), \
            f"{name}: run python -m linattn.companion.runner.notebooks --sync"
        knobs = notebooks.knobs(notebooks.read(path))
        assert {k: v.default for k, v in knobs.items()} == presets.table(name)["paper"], name


def test_sync_rewrites_a_stale_parameters_cell(tmp_path):
    src = notebooks.discover()["fig04_low_rank"]
    stale = tmp_path / "fig04_low_rank.md"
    stale.write_text(src.read_text().replace("head_num: int = 9", "head_num: int = 3"))
    assert notebooks.sync_parameters(stale) is True
    assert stale.read_text() == src.read_text()
    assert notebooks.sync_parameters(stale) is False  # in step: nothing to write


def test_runner_gives_the_notebook_every_setting_of_the_preset():
    """The executed notebook's parameters are the preset's values with the reader's overrides applied (a run-level
    override reaching every nested run; a dict override updating the dict); a notebook without presets gets the
    parameters as they are."""
    values = execute.notebook_values("fig04_low_rank", {"preset": "quick", "head_num": 12,
                                                       "epoch_extended": {2: 9999}})
    quick = presets.table("fig04_low_rank")["quick"]
    assert values["preset"] == "quick" and values["head_num"] == 12
    assert values["trainset_size"] == quick["trainset_size"]
    assert values["epoch_extended"] == {**quick["epoch_extended"], 2: 9999}
    nested = execute.notebook_values("fig05_softmax", {"preset": "paper", "lr": 0.5})
    assert nested["attn_m"]["lr"] == nested["attn_s"]["lr"] == 0.5
    assert execute.notebook_values("beyond_error_table", {"preset": "quick"}) == {"preset": "quick"}


def test_figure_settings_helpers():
    from linattn.companion.figures.common.preset_blocks import sweep

    s = presets.resolve("fig04_low_rank", "paper")
    assert presets.is_published("fig04_low_rank", s)
    assert presets.is_published("fig04_low_rank", dict(s, epoch_extended={1: 5}))  # a horizon is not a setting
    assert not presets.is_published("fig04_low_rank", dict(s, head_num=12))
    ext = s["epoch_extended"]
    assert presets.horizons(dict(s, ranks=[1, 3])) == {1: ext[1], 3: max(ext.values())}
    assert presets.horizons(dict(s, epoch_extended={1: 10})) == {R: s["epoch"] for R in s["ranks"]}
    namespace = dict(s, unrelated=1)
    got = presets.parameters("fig04_low_rank", namespace)
    assert got == s and got["ranks"] is not namespace["ranks"]  # a copy
    assert [(c.seed, c.rank) for c in sweep(s).values()] == [(sd, R) for sd in s["seeds"] for R in s["ranks"]]
    assert [c.model for c in sweep(presets.resolve("fig05_softmax", "quick"), run="attn_s").values()] == ["attnS"]


def _site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"]) / "linattn-test-out"


@pytest.mark.parametrize("where, message", [
    (lambda tmp: tmp / "a-file" / "out", "lies under .*a-file, which is a file"),
    (lambda tmp: tmp / "a-file", "is a file, not a folder"),
    (lambda tmp: Path("/proc/linattn-test-out"), "cannot be created in /proc"),
    (lambda tmp: _site_packages(), "inside the installed packages"),
])
def test_figures_out_is_checked_before_any_work(where, message, tmp_path, capsys):
    from linattn.cli import main

    (tmp_path / "a-file").write_text("not a folder")
    out = where(tmp_path)
    code = main(["figures", "--only", "fig01a_attnm_schematic", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("linattn figures: error: --out "), err
    assert re.search(message, err), err
    assert (tmp_path / "a-file").read_text() == "not a folder" and sorted(tmp_path.iterdir()) == [tmp_path / "a-file"]
    assert not _site_packages().exists()


def test_a_usable_out_passes_and_the_check_leaves_nothing(tmp_path):
    from linattn.companion.runner.paths import unusable_output_dir

    assert unusable_output_dir(tmp_path) is None and unusable_output_dir(tmp_path / "new" / "deeper") is None
    assert list(tmp_path.iterdir()) == []


def test_figures_param_needs_one_figure_and_a_folder(tmp_path, capsys):
    from linattn.cli import main
    assert main(["figures", "--param", "seeds=[3]", "--out", str(tmp_path / "o")]) == 2
    assert "--param needs --only" in capsys.readouterr().err
    assert main(["figures", "--only", "fig01b_attnm_loss", "--param", "seed=3"]) == 2
    assert "--param writes to --out DIR" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_notebook_command_writes_a_runnable_ipynb_and_refuses_bad_names(tmp_path, capsys):
    from linattn.cli import main
    target = tmp_path / "fig.ipynb"
    assert main(["notebook", "fig03a_attns_loss", "--out", str(target), "--preset", "quick"]) == 0
    printed = capsys.readouterr().out
    assert "pip install jupyterlab" in printed and "pip install nbconvert" in printed
    # the papermill command it prints passes seeds as a list: its -y text is YAML for {"seeds": [3]}
    run = shlex.split(next(line for line in printed.splitlines() if "papermill " in line).partition("papermill ")[2])
    assert run[0] == str(target) and run[2] == "-y" and yaml.safe_load(run[3]) == {"seeds": [3]}
    nb = nbformat.read(target, as_version=4)
    nbformat.validate(nb)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert "preset = 'quick'" in params.source and "epoch_extended" in params.source  # papermill finds the knobs
    assert nb.metadata["kernelspec"]["name"] == "python3" and "jupytext" not in nb.metadata
    assert main(["notebook", "fig03a_attns_loss", "--out", str(target)]) == 2  # exists: refused, not overwritten
    assert "exists" in capsys.readouterr().err
    assert main(["notebook", "nope", "--out", str(tmp_path / "n.ipynb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linattn notebook: error: unknown figure 'nope'") and "fig01b_attnm_loss" in err
    assert not (tmp_path / "n.ipynb").exists()
    assert main(["notebook", "fig03a_attns_loss", "--out", str(tmp_path / "missing" / "n.ipynb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not an existing folder" in err and not (tmp_path / "missing").exists()


def test_papermill_yaml_reads_back_as_the_python_values():
    values = {"seeds": [3, 4], "init": 1e-3, "init_scheme": "jan2025", "flow": True, "trainset_sizes": [None, 5]}
    assert yaml.safe_load(figure_commands.papermill_yaml(values)) == values


@pytest.mark.slow
def test_the_printed_papermill_command_runs_as_given(tmp_path, capsys, monkeypatch):
    """The command ``linattn notebook`` prints sets ``seeds`` to the list [3] (papermill's -p would pass "[3]")."""
    body = "(root / NAME / 'seeds.txt').write_text(repr(seeds))\n"
    src = make_src(tmp_path, {"one": body})
    text = (src / "one.md").read_text().replace("out_dir = None", "seeds: list = None  # which seeds\nout_dir = None")
    (src / "one.md").write_text(text.replace("root = Path(out_dir)", "root = Path(out_dir or '.')"))
    from linattn.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["notebook", "one", "--src", str(src), "--out", "one.ipynb"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "papermill " in line)
    command = shlex.split(line.partition("papermill ")[2].partition("   (")[0])
    papermill = Path(sys.executable).with_name("papermill")
    done = subprocess.run([str(papermill), *command, "-k", "python3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "one" / "seeds.txt").read_text() == "[3]"


def test_cite_block_links_every_file():
    text = citation.cite_block("fig01b_attnm_loss")
    for ext in ("pdf", "png", "csv"):
        assert f"<fig01b_attnm_loss/fig01b_attnm_loss.{ext}>" in text
    assert "<fig01b_attnm_loss/provenance.json>" in text
    assert ".nc>" not in text  # the labelled dataset is linked where the figure wrote one
    assert "<fig01b_attnm_loss/fig01b_attnm_loss.nc>" in citation.cite_block("fig01b_attnm_loss", netcdf=True)
    assert "fig-fig01b_attnm_loss" in text and "zhang2025training" in text and "2501.16265" in text
    from linattn import __version__
    assert f"version {__version__}" in text


def test_cite_block_names_the_papers_figure():
    """A page that reproduces a figure of the paper is cited by the paper's name, read from its title."""
    for name, path in notebooks.discover().items():
        source = path.read_text(encoding="utf-8")
        title = next(line for line in source.splitlines() if line.startswith("# "))
        block = citation.cite_block(name, source)
        if title.startswith("# Figure "):
            paper = title[2:].split(" — ")[0]
            assert f"reproduces **{paper}**" in block and f"{{ref}}`{paper} <fig-{name}>`" in block, name
        else:
            assert "reproduces" not in block, name


def test_figure_output_writes_all_files(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("LINATTN_FIGURES_DIR", str(tmp_path / "env"))
    assert figures_root() == tmp_path / "env"
    assert figures_root(tmp_path / "x") == tmp_path / "x"
    out = FigureOutput("demo", tmp_path / "root")
    assert not (tmp_path / "root").exists()  # nothing is made until a file is written: a failure leaves no folder
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    paths = out.save_figure(fig)
    assert [p.suffix for p in paths] == [".png", ".svg", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and paths[2].read_bytes()[:4] == b"%PDF"
    csv = out.save_table({"step": [0, 1, 2], "loss": [1.0, 0.5, 0.25]})
    assert csv.read_text().splitlines() == ["step,loss", "0,1", "1,0.5", "2,0.25"]
    with pytest.raises(ValueError, match="unequal"):
        out.save_table({"a": [1, 2], "b": [1]})
    table = out.save_numbers([dict(quantity="L*", paper=0.136, theory=0.13, reproduced=0.14),
                              dict(quantity="drops", paper=1, reproduced=2),
                              dict(quantity="nothing", reproduced=None)])
    rows = json.loads((out.dir / "numbers.json").read_text())
    assert rows[0]["abs_error"] == pytest.approx(0.01) and rows[1]["abs_error"] == pytest.approx(1.0)
    assert rows[2]["abs_error"] is None and set(rows[0]) == {"quantity", "paper", "theory", "reproduced",
                                                             "abs_error"}
    assert isinstance(table, NumbersTable) and "| L* |" in table._repr_markdown_() and "L*" in str(table)
    out.write_provenance({"lr": 0.1}, seeds=[3], engine="exact", wall_time=1.25, extra_key=7)
    prov = json.loads((out.dir / "provenance.json").read_text())
    assert prov["parameters"] == {"lr": 0.1} and prov["seeds"] == [3] and prov["engine"] == "exact"
    assert prov["wall_time_s"] == 1.25 and prov["extra_key"] == 7 and prov["figure"] == "demo"
    assert "libraries" in prov and "git_commit" in prov


def test_number_row_ignores_non_finite():
    assert number_row("x", theory=float("nan"), reproduced=1.0)["abs_error"] is None
    assert number_row("x", paper=2.0, reproduced=1.5)["abs_error"] == pytest.approx(0.5)


def test_settings_overrides_and_typos():
    s = presets.settings("fig01b_attnm_loss", "paper")
    assert s["head_num"] == 8 and s["init"] == 1e-6 and s["epoch"] == 6001 and s["seed"] == 10
    s = presets.settings("fig03a_attns_loss", "paper")
    s["seeds"].append(99)
    assert presets.table("fig03a_attns_loss")["paper"]["seeds"] == [0, 1, 2, 3, 4, 5]  # a copy, never the table
    assert presets.settings("fig03a_attns_loss", "quick", seeds=[1, 2])["seeds"] == [1, 2]
    assert presets.settings("fig01b_attnm_loss", "quick", seed=None)["seed"] == 10
    with pytest.raises(KeyError, match="seedz"):
        presets.settings("fig01b_attnm_loss", "quick", seedz=[1])
    with pytest.raises(KeyError, match="huge"):
        presets.settings("fig01b_attnm_loss", "huge")
    with pytest.raises(KeyError, match="no presets"):
        presets.settings("fig99", "quick")


def test_settings_run_overrides_reach_every_run():
    paper = presets.table("figA_vary_len")["paper"]
    s = presets.settings("figA_vary_len", "paper", seed=3, runs=dict(lr=0.5, epoch=None, draws="streams"))
    assert s["seed"] == 3
    for key in ("attn_m", "attn_s"):  # both nested runs get the run-level overrides; None keeps the preset's
        assert s[key]["lr"] == 0.5 and s[key]["draws"] == "streams" and s[key]["epoch"] == paper[key]["epoch"]
    assert paper["attn_m"]["lr"] == 0.03  # the table is untouched
    flat = presets.settings("fig03b_attns_values", "quick", runs=dict(lr=0.1))  # no sub-dicts: the preset itself
    assert flat["lr"] == 0.1
    assert presets.settings("figA_vary_len", "quick", runs={}) == presets.settings("figA_vary_len", "quick")
    with pytest.raises(KeyError, match="lrr"):
        presets.settings("figA_vary_len", "quick", runs=dict(lrr=0.1))


def test_every_notebook_has_presets_and_a_parameters_cell():
    for name, path in cachekey.discover().items():
        assert set(presets.table(name)) == {"quick", "paper"}, name
        nb = cachekey.read_notebook(path)
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert "parameters" in first_code.metadata.get("tags", []), name
        assert "out_dir = None" in first_code.source and 'preset = "' in first_code.source, name
        directive = [c.source for c in nb.cells if c.cell_type == "markdown" and f":name: fig-{name}" in c.source]
        assert len(directive) == 1, name
        assert f"{name}/{name}.png" in directive[0] or f"{name}/{name}.svg" in directive[0], name


def test_notebooks_are_prose_around_library_calls():
    """A figure's computation lives in its module (linattn.companion.figures): outside its parameters cell a
    notebook holds one call (``frame.build``) and the lines that show its tables: at most 8 non-blank lines of code
    each (comments count), and all of them at most 120."""
    lines = {}
    for name, path in cachekey.discover().items():
        cells = [c for c in cachekey.read_notebook(path).cells
                 if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])]
        lines[name] = sum(1 for c in cells for line in c.source.splitlines() if line.strip())
    assert max(lines.values()) <= 8, {n: k for n, k in lines.items() if k > 8}
    assert sum(lines.values()) <= 120, sum(lines.values())
    assert all(len(re.findall(rf"(?<![\w/`]){re.escape(n)}(?![\w/])",
                              "".join(c.source for c in cachekey.read_notebook(p).cells if c.cell_type == "code")))
               <= 1 for n, p in cachekey.discover().items()), "a notebook's code names its figure once"


def test_longest_figures_start_first(tmp_path):
    """A figure's expected time: its last run's wall time, else the notebook's own estimate for the preset, else 0."""
    src = make_src(tmp_path, {"slow": WRITE, "plain": WRITE}, extra={"slow": "linattn:\n  seconds: {paper: 400}\n"})
    nbs = {n: cachekey.read_notebook(src / f"{n}.md") for n in ("slow", "plain")}
    root = tmp_path / "out"
    assert schedule._expected_seconds(root, "slow", nbs["slow"], "paper") == 400.0
    assert schedule._expected_seconds(root, "slow", nbs["slow"], "quick") == 0.0
    assert schedule._expected_seconds(root, "plain", nbs["plain"], "paper") == 0.0
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "provenance.json").write_text(json.dumps({"wall_time_s": 12.5}))
    assert schedule._expected_seconds(root, "plain", nbs["plain"], "paper") == 12.5


def test_median_and_range_ignores_what_did_not_happen():
    assert median_and_range([300.0, np.nan, 100.0, 200.0, np.inf]) == "200 (100–300)"
    assert median_and_range([np.nan]) == "not within the run"


def test_save_rows_writes_text_and_numbers_and_empty_cells(tmp_path):
    out = FigureOutput("tbl", tmp_path)
    path = out.save_rows([{"figure": "a", "value": 1.234567891, "note": None},
                          {"figure": "b, quoted", "value": 2, "note": "not comparable: text"}],
                         ["figure", "value", "note"])
    with open(path, newline="") as f:
        assert list(csv.reader(f)) == [["figure", "value", "note"], ["a", "1.23457", ""],
                                       ["b, quoted", "2", "not comparable: text"]]


def test_save_table_pads_short_columns_only_when_asked(tmp_path):
    out = FigureOutput("pad", tmp_path)
    with pytest.raises(ValueError, match="pad=True"):
        out.save_table({"step": np.arange(3), "loss": np.ones(2)})
    path = out.save_table({"step": np.arange(3), "loss": np.ones(2)}, pad=True)
    table = np.genfromtxt(path, delimiter=",", names=True)
    assert table["step"].tolist() == [0, 1, 2] and table["loss"][:2].tolist() == [1, 1] and np.isnan(table["loss"][2])


def test_prose_helpers():
    """What a page's prose is given: plain Python values (numpy 2's repr would show ``np.float64(…)``), words without
    quotes, lists written out, and one table renderer for every Markdown table."""
    from linattn.companion.output import MarkdownTable, prose_value, words

    assert type(prose_value(np.float64(2.5))) is float and type(prose_value(np.int64(3))) is int
    assert prose_value(float("nan")) is None and prose_value("a") == "a"
    assert words([3034, 7297.0, 11979]) == "3034, 7297 and 11979" and words([0.25]) == "0.25" and words([]) == "–"
    table = MarkdownTable([dict(a=1, b=np.float64(0.123456), c=None, d="x|y")],
                          {"a": "A", "b": "B", "c": "C", "d": "D"}, {"b": ".2f"})._repr_markdown_().splitlines()
    assert table == ["| A | B | C | D |", "|---|---|---|---|", "| 1 | 0.12 | – | x\\|y |"]


def test_log_axis_start_is_a_decade_below_the_earliest_drop():
    from linattn.companion.plotting import log_axis_start

    assert log_axis_start([380.0, np.nan, 1200.0], fallback=5000) == 100.0
    assert log_axis_start([np.nan, np.nan], fallback=5000) == 1000.0  # nothing dropped: from the run's length
    assert log_axis_start([3.0], fallback=5000) == 10.0  # never below 10


def test_set_up_code_before_the_figure_is_left_off_the_page_and_the_rest_folded():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Figure 9 — title"),
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("preset = 'paper'", metadata={"tags": ["parameters", "hide-input"]}),
        nbformat.v4.new_code_cell("import numpy"),
        nbformat.v4.new_markdown_cell("```{figure} a.svg\n:name: fig-a\n\nCaption.\n```"),
        nbformat.v4.new_code_cell("table()", metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell("more()"),
    ])
    execute.tag_code_cells(nb)
    tags = [c.metadata.get("tags") for c in nb.cells if c.cell_type == "code"]
    assert tags == [["injected-parameters", "remove-cell"], ["parameters", "remove-input"], ["remove-input"],
                    ["hide-input"], ["hide-input"]]
    # without a figure, nothing comes before one: all set-up, none folded (a page of prose and tables only)
    bare = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1")])
    execute.tag_code_cells(bare)
    assert bare.cells[0].metadata["tags"] == ["remove-input"]


def test_the_packaged_citation_is_the_repositorys_and_the_cite_cell_reads_it():
    """An installed copy cites from the CITATION.cff shipped in the package: it must be the root's, and the cite
    cell's BibTeX must carry what the file says (no second copy of the metadata in code)."""
    from linattn.companion.runner import citation

    assert citation.cff_text() == (Path(linattn.__file__).parent.parent / "CITATION.cff").read_text(encoding="utf-8")
    paper = citation.cff()["preferred-citation"]
    block = citation.cite_block("fig01b_attnm_loss")
    assert f"title         = {{{paper['title']}}}" in block and f"volume        = {{{paper['volume']}}}" in block
    assert f"pages         = {{{paper['start']}--{paper['end']}}}" in block and "eprint        = {2501.16265}" in block
    assert "author        = {Zhang, Yedi and Singh, Aaditya K. and Latham, Peter E. and Saxe, Andrew M.}" in block
    assert f"version = {{{linattn.__version__}}}" in block

"""The options of ``linattn figures`` and ``linattn notebook``, apart from the runner that carries them out: the
command's parser is built from this small module alone, so ``linattn --help``, ``--version`` and every refusal of
another command answer without importing the runner (:mod:`linattn.companion.runner.schedule`) or what it needs."""

from __future__ import annotations

import argparse
from pathlib import Path

PRESET_CHOICES = ("paper", "quick")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``linattn figures`` (:func:`linattn.companion.runner.figure_commands.cmd_figures` reads them)."""
    p.add_argument("--preset", choices=PRESET_CHOICES, default="paper",
                   help="paper: the published settings (default, what `make book` shows); quick: CI-sized runs")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these figures (names of figures_src/*.md)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override one of the notebooks' parameters (repeatable; a Python literal, e.g. seed=3, "
                        "init=1e-3, init_scheme=jan2025); needs --only and --out DIR (or --into-book)")
    p.add_argument("--out", type=Path, default=None,
                   help="output root (default _build/figures/<preset>, the folder the book of that preset reads)")
    p.add_argument("--into-book", dest="into_book", action="store_true",
                   help="with --param: write into the book's own figures (its pages then show the overrides)")
    p.add_argument("--jobs", type=int, default=2, help="figures executed in parallel (default 2)")
    p.add_argument("--force", action="store_true", help="re-run figures even when their cache key is unchanged")
    p.add_argument("--retrain", action="store_true",
                   help="train the figures' runs again instead of reading them from the run store (implies --force)")
    p.add_argument("--src", type=Path, default=None, help="folder of the notebooks (default figures_src/)")
    p.add_argument("--timeout", type=float, default=None, help="seconds allowed per notebook cell")
    p.add_argument("--list", action="store_true", help="list the figures and whether their outputs are current")


def add_notebook_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``linattn notebook`` (:func:`linattn.companion.runner.figure_commands.cmd_notebook` reads
    them)."""
    p.add_argument("name", help="a figure's name (a file of figures_src/ without .md)")
    p.add_argument("--out", type=Path, default=None, help="where to write it (default ./NAME.ipynb)")
    p.add_argument("--preset", choices=PRESET_CHOICES, default="paper", help="the preset its parameters cell sets")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument("--src", type=Path, default=None, help=argparse.SUPPRESS)

"""The companion: everything that turns the science core into the book, and nothing the core needs.

    runner/    execute the figure notebooks (figures_src/) into _build/figures/<preset>, cached per figure: its
               commands and their options, the schedule, the notebooks as files, the cache key, the paths
    figures/   one module per figure notebook, and what several share (figures/common/)
    presets    every figure's settings at the paper and the quick size: the one source of its knobs and its runs
    runstore   content-addressed training runs under _build/runs, shared by every notebook that asks for one
    output     a figure's files (images, CSV, numbers.json, provenance.json), written atomically
    published  what the authors' published plots show, and how ours compare
    plotting   the book's figure style and drawing helpers
    commands   the `linattn train` command of a run's settings
    book       build the Jupyter Book of one preset
    readme     the README's reproduction table, written from the built numbers
    reproduce  re-execute an executed notebook with nbval and compare its text outputs with the book's
    extras     which of linattn's optional dependencies are installed
    uncertainty  standard errors, difference bands and the verdicts of every comparison
    sweeps     grids of runs on Dask, resumable, as one xarray Dataset (``sweeps.sweep``; needs the ``sweep`` extra)

Imports run from here into the core (``linattn.training.experiment``, ``linattn.theory``, …), never back.
"""


"""The companion: everything that turns the science core into the book, and nothing the core needs.

    runner     execute the figure notebooks (figures_src/) into _build/figures/<preset>, cached per figure
    notebooks  the notebooks as files: discovery, parameters cells, a reader's overrides
    sources    which linattn source files a notebook depends on (its cache key)
    presets    every figure's settings at the paper and the quick size
    runstore   content-addressed training runs under _build/runs, shared by every notebook that asks for one
    output     a figure's files (images, CSV, numbers.json, provenance.json), written atomically
    published  what the authors' published plots show, and how ours compare
    plotting   the book's figure style and drawing helpers
    commands   the `linattn train` command of a run's settings
    book       build the Jupyter Book of one preset
    paths      where all of this lives

Imports run from here into the core (``linattn.experiment``, ``linattn.theory``, …), never back.
"""

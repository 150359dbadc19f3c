"""The figure runner: execute the figure notebooks (figures_src/) into _build/figures/<preset>, cached per figure.

    figure_args      the options of `linattn figures` and `linattn notebook` (the CLI's parser, without the runner)
    figure_commands  those two commands: check the request, then schedule it
    schedule         which figures are current, and a pool of workers that executes the rest
    execute          one notebook executed by papermill in a kernel of its own
    publish          the executed figure moved into the book's folder whole, under a lock
    cachekey         a figure's cache key; sources: which linattn source files a notebook depends on
    notebooks        the notebooks as files: discovery, parameters cells (written from the presets), overrides
    citation         the "Cite this figure" cell, from CITATION.cff
    interrupts       SIGINT and SIGTERM alike (also for ``linattn train`` and ``linattn sweep``)
    lifetime         child processes that end with the command that started them
    paths            where all of this lives
"""

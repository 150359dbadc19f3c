"""What several figure modules share: the page frame (:mod:`.frame`), the shared ATTN_S run and the low-rank
summaries (:mod:`.attn_s_run`, :mod:`.low_rank`), the preset building blocks and shared knob help
(:mod:`.preset_blocks`), the schematics' size words (:mod:`.schematic`), the declaration of the runs a figure trains
(:mod:`.runs`) and their training through the run store (:mod:`.trainer`). No figure lives here: ``figures/`` holds
one module per notebook of ``figures_src/`` and this package."""

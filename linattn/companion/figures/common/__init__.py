"""What several figure modules share: the page frame (:mod:`.frame`), the shared ATTN_S run and the low-rank
summaries (:mod:`.attn_s_run`, :mod:`.low_rank`), the preset building blocks and shared knob help (:mod:`.presets`),
the schematics' size words (:mod:`.schematic`) and the declaration of the runs a figure trains (:mod:`.runs`). No
figure lives here: ``figures/`` holds one module
per notebook of ``figures_src/`` and this package."""

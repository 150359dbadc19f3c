"""Each figure's computation as a library function, usable without the book.

A figure module (``fig01b``, …) holds the whole recipe of one page, top to bottom:

* ``NAME`` and ``settings(preset="paper", **overrides)``: the figure's settings (:mod:`linattn.companion.presets`);
* ``compute(S) -> xarray.Dataset``: trains through the run store and returns every curve and derived quantity with
  named dimensions (``model``, ``seed``, ``rank``, ``step``, ``direction``, …), the theory's levels as variables
  and the settings as attributes;
* ``numbers(ds)``: its ``numbers.json`` rows, each with a stable ``key``;
* ``plot(ds)``: the figure, and ``words(ds)``: the values the page's prose quotes.

The notebook is prose around those calls, in one frame (:func:`~linattn.companion.figures.frame.figure`) that times
the page, sets the style and writes the files::

    from linattn.companion.figures import fig01b
    ds = fig01b.compute(fig01b.settings(seed=3))
    ds.train_loss.sel(model="attn_m").plot()
"""

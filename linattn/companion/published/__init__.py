"""The published readings and how ours compare with them, in three modules (``published.readings``, ``published.rules``,
``published.page``), all loaded with the package:

* :mod:`~linattn.companion.published.readings`: the hand-read published curves and the numbers the paper states;
* :mod:`~linattn.companion.published.rules`: measuring ours, differences and verdicts, Figure 3a's one-to-one
  pairing, the claims of the paper's text;
* :mod:`~linattn.companion.published.page`: tables, sentences and ``numbers.json`` rows for the pages and the report.
"""

from . import page, readings, rules  # noqa: F401  (the package's three parts, one import away)

"""The published readings and how ours compare with them, in three modules (``published.readings``, ``published.rules``,
``published.page``), all loaded with the package:

* :mod:`~linattn.companion.published.readings`: the types of the hand-read published curves (images, readings,
  crossings);
* :mod:`~linattn.companion.published.rules`: measuring ours, differences and verdicts, the one-to-one pairing of
  curves with crossings, the form of a claim of the paper's text;
* :mod:`~linattn.companion.published.page`: tables, sentences and ``numbers.json`` rows for the pages and the report.

Each figure's own readings and rules live with its module (``figures/<name>.py``); nothing here names a figure.
"""

from . import page, readings, rules  # noqa: F401  (the package's three parts, one import away)

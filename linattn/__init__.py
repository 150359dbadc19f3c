"""linattn: a reproducible companion to *Training Dynamics of In-Context Learning in Linear Attention*
(Zhang, Singh, Latham, Saxe; ICML 2025, arXiv:2501.16265).

Modules, read in this order: ``data`` (the task), ``models`` (ATTN_M, ATTN_S, MLP), ``engines`` (the loss, three
ways), ``train`` (gradient descent), ``config`` and ``run`` (one run from settings), ``cli`` (the ``linattn`` command).
"""

__version__ = "0.1.0"

"""The figure runner, by its old name: a re-export of the modules it was split into (to be removed once every
caller imports them directly).

- :mod:`linattn.companion.cachekey` — a figure's cache key and run record;
- :mod:`linattn.companion.citation` — the "Cite this figure" cell, from ``CITATION.cff``;
- :mod:`linattn.companion.execute` — execution of one notebook in a worker (papermill, a kernel);
- :mod:`linattn.companion.publish` — staging, the per-figure lock and the swap that publishes a figure whole;
- :mod:`linattn.companion.schedule` — many figures in a pool of workers (``run_figures``, ``list_figures``);
- :mod:`linattn.companion.figure_commands` — the ``linattn figures`` and ``linattn notebook`` commands.
"""

from ..records import library_versions
from .cachekey import (
    CACHE_KEY,
    RUN_INFO,
    discover,
    expected_key,
    figure_key,
    is_current,
    is_report,
    read_notebook,
    run_info,
)
from .citation import cite_block
from .execute import KERNEL_START_TIMEOUT, THREAD_ENV, PrintedWarning, notebook_values, tag_code_cells
from .figure_args import PRESET_CHOICES
from .figure_commands import cmd_figures, cmd_notebook, papermill_yaml
from .paths import preset_root
from .schedule import FigureResult, _expected_seconds, done_line, list_figures, run_figures

__all__ = ["CACHE_KEY", "KERNEL_START_TIMEOUT", "PRESET_CHOICES", "RUN_INFO", "THREAD_ENV", "FigureResult",
           "PrintedWarning", "_expected_seconds", "cite_block", "cmd_figures", "cmd_notebook", "discover", "done_line",
           "expected_key", "figure_key", "is_current", "is_report", "library_versions", "list_figures",
           "notebook_values", "papermill_yaml", "preset_root", "read_notebook", "run_figures", "run_info",
           "tag_code_cells"]

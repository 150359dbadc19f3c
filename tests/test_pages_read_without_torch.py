"""The pages that only read stored runs compute from the run store's weight arrays without importing torch (torch is
imported where a model, an engine or a draw runs: these pages run none once their runs are stored). Each check runs in
a fresh interpreter, after the runs were trained into a store of the test's own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from linattn.companion import figures, presets
from linattn.companion.runner.paths import ENV_RUNS_DIR

# every page whose kernel trains nothing when its runs are stored, and reads no data set drawn by torch's generator
PAGES = ("beyond_pcr", "beyond_diagnostics", "figA_inside_head", "fig03b_attns_values", "figA_white_cov")

_READ = """
    import json, sys
    from linattn.companion import figures, presets
    for name in sys.argv[1:]:
        fig = figures.module(name)
        ds = fig.compute(presets.resolve(name, "quick"))
        fig.numbers(ds), fig.words(ds)
    print(json.dumps(sorted(m for m in ("torch", "linattn.models", "linattn.reference_draws") if m in sys.modules)))
"""


def test_pages_that_read_stored_runs_import_no_torch(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_RUNS_DIR, str(tmp_path))
    for name in PAGES:  # trains every run each page reads (population twins included) into the store
        figures.module(name).compute(presets.resolve(name, "quick"))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_READ), *PAGES], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], f"reading {PAGES} imported torch: {done.stdout}"

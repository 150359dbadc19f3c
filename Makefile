# Two entry points (see README):
#   make book   set up .venv, run every figure notebook (PRESET=paper by default) into _build/figures/paper, build the
#               HTML book in _build/html
#   make test   set up .venv and Chromium, build the quick book (_build/figures/quick -> _build/quick/html), run the
#               test suite on it; the paper book in _build/html is left as it was
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PRESET  ?= paper
JOBS    ?= 2
TEST_JOBS ?= 2
STAMP   := $(VENV)/.installed

.PHONY: setup figures book test test-fast test-setup linkcheck check-reproducible bench clean

setup: $(STAMP)

# torch first, by itself: `torch==2.13.0` (a CPU wheel where one is provided locally), so nothing pulls CUDA builds.
# Each stage says what it is doing before it starts (pip runs quietly: a few minutes without a line otherwise).
$(STAMP): pyproject.toml constraints.txt
	@echo "setup: creating $(VENV) with $(PY) ($$(date +%T))"
	$(PY) -m venv $(VENV)
	@echo "setup: installing pip, then torch 2.13.0 (the largest download; a few minutes on a slow link)"
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23.2"
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	@echo "setup: installing linattn and its figures, book and test dependencies ($$(date +%T))"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[figures,book,test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@echo "setup: done ($$(date +%T))"
	touch $@

figures: setup
	@echo "figures: running the $(PRESET) figures, $(JOBS) at a time (a line as each starts, every 30 s while it runs, and as it ends)"
	$(BIN)/linattn figures --preset $(PRESET) --jobs $(JOBS)

# a build writes only build outputs: README.md's reproduction table is checked against the paper build's numbers
# (tests/test_readme_numbers.py), never rewritten by it
book: figures
	@echo "book: building the $(PRESET) book's HTML from the figures ($$(date +%T))"
	$(BIN)/python -m linattn.companion.book build --preset $(PRESET)

linkcheck: setup
	$(BIN)/python -m linattn.companion.book links --preset $(PRESET)

# Re-execute every executed notebook of PRESET with nbval and compare its text outputs with the book's; the runs are
# read from the run store, or all trained again in an empty one with FRESH=1 (as long as building the figures)
check-reproducible: figures
	$(BIN)/python -m linattn.companion.reproduce --preset $(PRESET) $(if $(FRESH),--fresh-runs)

# Chromium renders the built pages for the reader tests (Debian's package; needs root, as in CI).
test-setup: setup
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium is not installed and this is not root; the browser tests will be skipped"; fi; }

# The suite on TEST_JOBS processes (pytest-xdist), a test file to a process so that its module fixtures run once
test: test-setup
	$(MAKE) book PRESET=quick
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile

# The fast subset (under a minute): no built figures or book, no browser, no test over about a second.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow and not book" -n $(TEST_JOBS) --dist loadfile

bench: setup
	$(BIN)/python benchmarks/bench_engines.py
	$(BIN)/python benchmarks/bench_sweep.py
	OPENBLAS_NUM_THREADS=1 $(BIN)/python benchmarks/bench_flow.py
	$(BIN)/python benchmarks/bench_startup.py

clean:
	rm -rf _build runs

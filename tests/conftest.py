"""Shared test setup.

Markers (registered in pyproject.toml): ``book`` for a test that reads the built quick figures or book (or drives
the browser), ``slow`` for any other test over about a second, each marked in its own module. ``make test-fast`` runs
``-m "not slow and not book"``.

:func:`require_built` is the one place where a test that needs a built output (or Chromium) skips or, in CI, fails.
"""

import os

import pytest
import torch

# The suite's problems are small: one intra-op thread avoids OpenMP spin-waits that make tiny ops 100× slower when
# the two cores are shared (e.g. with the figure runner's kernels).
torch.set_num_threads(1)

REQUIRE_ENV = "LINATTN_REQUIRE_BROWSER"


def require_built(reason: str):
    """Stop the calling test (or fixture) because something `make test` builds or installs is missing: the quick
    figures, the quick book, a page of it, Chromium. A skip with ``reason`` — but a failure where
    ``$LINATTN_REQUIRE_BROWSER`` is ``1`` (CI, ``.ci/run``), where all of them must be there."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: required here)", pytrace=False)
    pytest.skip(reason)

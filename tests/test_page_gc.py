"""frame.fewer_collections: a page runs with the cyclic garbage collector's youngest threshold raised, still
collecting cycles, and leaves the thresholds as they were."""

from __future__ import annotations

import gc
import weakref

import pytest

from linattn.companion.figures.common.frame import PAGE_GC_THRESHOLD, fewer_collections


class Node:
    """An object that can sit in a reference cycle."""

    def __init__(self):
        self.other = None


def test_threshold_raised_inside_and_restored_after():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == (PAGE_GC_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before


def test_thresholds_restored_when_the_page_fails():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections(5_000):
        raise RuntimeError("the page failed")
    assert gc.get_threshold() == before


def test_garbage_in_a_cycle_is_still_collected_without_asking():
    assert gc.isenabled()
    with fewer_collections(2_000):
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        kept = [Node() for _ in range(10 * 2_000)]  # allocations past the threshold start a collection
        assert gone() is None and len(kept) == 20_000

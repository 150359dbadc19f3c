"""``native.huge_page_copy``: the softmax engine's context tokens in memory advised for 2 MB pages."""

import mmap
import sys

import pytest
import torch

from linattn.objectives import native


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address`` (Linux: /proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    inside = False
    for line in lines:
        head = line.split()[0] if line.split() else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_the_copy_is_contiguous_equal_and_apart_from_its_source():
    src = torch.arange(3 * 40 * 5 * 32 * 32, dtype=torch.float32).reshape(3, 40, 5, 32, 32).movedim(0, 1)
    assert src.numel() * src.element_size() >= native.HUGE_PAGE and not src.is_contiguous()
    out = native.huge_page_copy(src)
    assert out.is_contiguous() and out.dtype == src.dtype and torch.equal(out, src)
    out[0, 0, 0, 0, 0] = -1.0
    assert src[0, 0, 0, 0, 0] == 0.0


def test_a_tensor_under_a_huge_page_is_only_made_contiguous():
    src = torch.ones(8, 4, dtype=torch.float64).t()
    out = native.huge_page_copy(src)
    assert out.is_contiguous() and torch.equal(out, src)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="madvise(MADV_HUGEPAGE) is Linux's")
def test_a_large_copy_lies_in_private_memory_advised_for_huge_pages():
    out = native.huge_page_copy(torch.zeros(2 * native.HUGE_PAGE // 4, dtype=torch.float32))
    flags = _vm_flags(out.data_ptr())
    assert "hg" in flags and "sh" not in flags  # shared memory would get no transparent huge pages

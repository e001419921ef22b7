"""Huge-page backed buffers for the weights and the KV cache: same values, aligned, one buffer."""
from __future__ import annotations

import sys

import pytest
import torch

from llmchat.kernels.memory import advise_huge_pages, huge_page_zeros, pack_into_huge_pages

HUGE = 2 << 20
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_HUGEPAGE) is Linux only")


def test_pack_into_huge_pages_copies_every_tensor_into_one_aligned_buffer():
    tensors = [torch.randn(3, 5, 32).to(torch.bfloat16), torch.randn(7), torch.randn(1000, 700).to(torch.bfloat16)]
    copies = pack_into_huge_pages(tensors)
    assert len({c.untyped_storage().data_ptr() for c in copies}) == 1
    assert copies[0].data_ptr() % HUGE == 0
    for original, copy in zip(tensors, copies):
        assert copy.dtype == original.dtype and copy.shape == original.shape and copy.is_contiguous()
        assert copy.data_ptr() % 64 == 0 and torch.equal(copy, original)
        assert copy.data_ptr() != original.data_ptr()


def test_huge_page_zeros_is_zeroed_and_aligned():
    cache = huge_page_zeros((2, 3, 4, 16), torch.bfloat16)
    assert cache.shape == (2, 3, 4, 16) and cache.dtype == torch.bfloat16 and cache.is_contiguous()
    assert cache.data_ptr() % HUGE == 0 and not cache.any()


@linux_only
def test_huge_page_zeros_commits_memory_only_as_it_is_written():
    import psutil
    process = psutil.Process()
    before = process.memory_info().rss
    cache = huge_page_zeros((512, 1 << 20), torch.uint8)            # 512 MiB, untouched
    assert process.memory_info().rss - before < 64 << 20
    cache[:64].fill_(1)                                            # the first 64 MiB written
    assert 48 << 20 < process.memory_info().rss - before < 160 << 20
    assert not cache[64:].any() and cache[:64].all()               # reading zero pages commits nothing much


@linux_only
def test_advise_reaches_the_end_of_the_storage_only():
    buffer = torch.empty(3 * HUGE, dtype=torch.uint8)
    view = buffer[HUGE:]
    assert advise_huge_pages(view) is True          # at least one whole 2 MiB page between view start and storage end
    assert advise_huge_pages(buffer[-HUGE // 2:]) is False  # less than a page left in the storage

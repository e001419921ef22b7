"""The kernels' worker pool: every thread count covers all the work, the pool follows torch.set_num_threads,
and concurrent callers (which the pool runs inline) still get correct results."""
from __future__ import annotations

import threading

import pytest
import torch

import llmchat.kernels as K
from paged_batch import make_batch, reference_attention


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def attend(b):
    return K.paged_attention(b.query, b.key_cache, b.value_cache, b.block_tables, b.seq_lens, b.query_start_loc,
                             b.scale)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_every_thread_count_computes_every_row(threads, restore_threads):
    torch.manual_seed(threads)
    torch.set_num_threads(threads)
    x = torch.randn(301, 96)                         # more rows than chunks: each chunk several rows
    w = torch.rand(96) + 0.5
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(K.rms_norm(x, w, 1e-6), ref, atol=1e-5, rtol=1e-5)
    b = make_batch([(1, 700), (1, 33), (9, 90)], 8, 2, 64, 16, torch.float32)
    torch.testing.assert_close(attend(b), reference_attention(b), atol=2e-5, rtol=2e-5)


def test_concurrent_callers_get_their_own_results(restore_threads):
    torch.set_num_threads(2)
    batches = [make_batch([(1, 200 + 50 * i), (3, 40)], 8, 2, 64, 16, torch.float32, seed=i) for i in range(4)]
    want = [reference_attention(b) for b in batches]
    got: dict[int, list[torch.Tensor]] = {i: [] for i in range(4)}
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            for _ in range(25):
                got[i].append(attend(batches[i]))
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        assert len(got[i]) == 25
        for out in got[i]:
            torch.testing.assert_close(out, want[i], atol=2e-5, rtol=2e-5)

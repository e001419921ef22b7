"""Op level: a kernel's result for one row (a token) does not depend on how many rows share the call, how
they are tiled, how its keys are laid out in the paged cache, or on the thread count."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K

pytestmark = pytest.mark.skipif(not K.available(), reason="kernels not built")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def threads(n: int):
    class Scope:
        def __enter__(self):
            self.old = torch.get_num_threads()
            torch.set_num_threads(n)

        def __exit__(self, *exc):
            torch.set_num_threads(self.old)
    return Scope()


# ---- projections -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [64, 100, 576])
def test_linear_rows_do_not_depend_on_m_or_threads(dtype, k):
    g = torch.Generator().manual_seed(k)
    n = 203   # not a multiple of the 4-row blocks or 16-row panels
    w = torch.randn(n, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    x = torch.randn(300, k, generator=g).to(dtype)
    weights = [w]
    if dtype == torch.bfloat16 and K.packed_native():
        weights.append(K.pack_linear_weight(w))
    for weight in weights:
        want = torch.cat([K.linear_small_m(x[i:i + 1], weight, bias, out_features=n) for i in range(x.shape[0])])
        for t in (1, 2):
            with threads(t):
                for m in (2, 5, 33, 64, 300):
                    got = torch.cat([K.linear_small_m(x[s:s + m], weight, bias, out_features=n)
                                     for s in range(0, x.shape[0], m)])
                    assert torch.equal(got, want), (dtype, k, m, t)


# ---- attention ---------------------------------------------------------------------------------------------
def place(kv: torch.Tensor, table: list[int], num_blocks: int, bs: int, per_group: int) -> torch.Tensor:
    """Logical [L, Hkv, D] keys or values into a paged cache whose logical block i is physical table[i]."""
    L, hkv, d = kv.shape
    plain = torch.zeros(num_blocks, hkv, bs, d, dtype=kv.dtype)
    for i, b in enumerate(table):
        piece = kv[i * bs:(i + 1) * bs]
        plain[b, :, :piece.shape[0]] = piece.transpose(0, 1)
    if per_group == 1:
        return plain
    return plain.view(num_blocks // per_group, per_group, hkv, bs, d).transpose(1, 2).contiguous()


class Sequence:
    """One sequence's keys, values and queries at every position, in a cache layout of its own."""

    def __init__(self, length, hq, hkv, d, dtype, bs, per_group, shuffled, seed):
        g = torch.Generator().manual_seed(seed)
        self.k = torch.randn(length, hkv, d, generator=g).to(dtype)
        self.v = torch.randn(length, hkv, d, generator=g).to(dtype)
        self.q = torch.randn(length, hq, d, generator=g).to(dtype)
        n = -(-length // bs)
        self.num_blocks = -(-(n + 5) // per_group) * per_group
        order = torch.randperm(self.num_blocks, generator=g) if shuffled else torch.arange(self.num_blocks)
        self.table = order[:n].tolist()
        self.kc = place(self.k, self.table, self.num_blocks, bs, per_group)
        self.vc = place(self.v, self.table, self.num_blocks, bs, per_group)
        self.scale = d ** -0.5

    def attend(self, spans: list[tuple[int, int]], window: int) -> torch.Tensor:
        """Query positions [a, b) of each span as one sequence of a batch (all over this cache)."""
        q = torch.cat([self.q[a:b] for a, b in spans])
        tables = torch.tensor([self.table] * len(spans), dtype=torch.int32)
        seq_lens = torch.tensor([b for _, b in spans], dtype=torch.int32)
        qsl = torch.zeros(len(spans) + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor([b - a for a, b in spans]), 0)
        return K.paged_attention(q, self.kc, self.vc, tables, seq_lens, qsl, self.scale, window)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 64), (3, 1, 64), (2, 2, 128)])
@pytest.mark.parametrize("window", [-1, 100])
def test_attention_rows_do_not_depend_on_tiles_chunks_layout_or_threads(dtype, hq, hkv, d, window):
    length, bs = 700, 16     # longer than a softmax segment (512 keys): splits and folds are exercised
    layouts = [Sequence(length, hq, hkv, d, dtype, bs, per_group, shuffled, seed=5)
               for per_group, shuffled in ((1, True), (4, False), (4, True))]
    with threads(2):
        want = layouts[0].attend([(0, length)], window)        # one prefill of everything
    positions = [0, 15, 16, 63, 64, 100, 511, 512, 513, length - 1]
    for seq in layouts:
        for t in (1, 2):
            with threads(t):
                for chunk in (1, 7, 64, 300):   # chunked prefill; chunk 1 at the positions is decoding
                    spans = ([(p, p + 1) for p in positions] if chunk == 1 else
                             [(a, min(length, a + chunk)) for a in range(0, length, chunk)])
                    if chunk == 1:   # each decode alone (a split plan) and all in one batch
                        got = torch.cat([seq.attend([s], window) for s in spans])
                        assert torch.equal(got, want[positions]), ("decode alone", t)
                        got = seq.attend(spans, window)
                        assert torch.equal(got, want[positions]), ("decodes batched", t)
                        continue
                    got = torch.cat([seq.attend([s], window) for s in spans])
                    assert torch.equal(got, want), ("chunk", chunk, t)


# ---- per-row ops -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_and_activation_rows_do_not_depend_on_m_or_threads(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(70, 200, generator=g).to(dtype)
    w = torch.randn(200, generator=g).to(dtype)
    want_norm = torch.cat([K.rms_norm(x[i:i + 1], w, 1e-6) for i in range(70)])
    want_act = torch.cat([K.silu_and_mul(x[i:i + 1]) for i in range(70)])
    for t in (1, 2):
        with threads(t):
            assert torch.equal(K.rms_norm(x, w, 1e-6), want_norm)
            assert torch.equal(K.silu_and_mul(x), want_act)

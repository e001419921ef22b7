"""Random quantized weights of every kind, for the kernel tests (values in each kind's full range)."""
from __future__ import annotations

import torch

import llmchat.kernels as K
from llmchat.kernels.quant import QuantWeight

KINDS = ["q8", "q8h", "q4", "q5", "q6"]
NEON_TILE_KINDS = ["q8", "q8h", "q4", "q5", "q6"]  # every kind, Q6_K in its 6 bits too


# how a weight's block factors are stored: fp32 scales and mins, fp16 ones, or fp16 scales with min = -8 scale
FACTORS = ["f32", "f16", "offset"]


def random_weight(kind: str, n: int, k: int, seed: int = 0, mins: bool = True, factors: str = "f32") -> QuantWeight:
    g = torch.Generator().manual_seed(seed)
    nb = k // 32
    dtype = torch.float32 if factors == "f32" else torch.float16
    scales = (torch.rand(n, 2 * nb if kind in ("q8h", "q6") else nb, generator=g) * 0.02 + 1e-4).to(dtype)
    if kind in ("q8", "q8h"):
        values = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        return QuantWeight(kind, values, scales, source=kind)
    values = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.int32).to(torch.uint8)
    if kind == "q6":  # no mins nor offset (w = u - 32): two bit planes a block
        high = torch.randint(-2**31, 2**31, (n, 2 * nb), generator=g, dtype=torch.int64).to(torch.int32)
        return QuantWeight(kind, values, scales, None, high, source=kind)
    high = torch.randint(-2**31, 2**31, (n, nb), generator=g, dtype=torch.int64).to(torch.int32) if kind == "q5" else None
    if factors == "offset":
        return QuantWeight(kind, values, scales, None, high, source=kind, min_offset=-8 if mins else 0)
    lows = (-(torch.rand(n, nb, generator=g) * 0.1)).to(dtype) if mins else None
    return QuantWeight(kind, values, scales, lows, high, source=kind)


def assert_rows_keep_their_bits(w: QuantWeight) -> None:
    """Rows of x @ w (k = 352) have the same bits in a 1-row decode, a 7-row batch, a 13-row one (where AMX is
    granted: one tile padded with zero tokens), a 16-row tile, a 17-, a 29- and a 40-row step and a 64-row prefill,
    at one thread and at torch's count, whatever rows come before them: the paths and tile shapes the batch size
    picks must not change a row."""
    x = torch.randn(300, 352, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    full = K.quant_linear(x, w)
    threads = torch.get_num_threads()
    try:
        for m, nthreads in [(1, 1), (7, threads), (13, 1), (16, 1), (17, threads), (29, threads), (40, 1),
                            (64, threads)]:
            torch.set_num_threads(nthreads)
            for start in (0, 5, 233):
                assert torch.equal(K.quant_linear(x[start:start + m], w), full[start:start + m]), (m, nthreads, start)
    finally:
        torch.set_num_threads(threads)

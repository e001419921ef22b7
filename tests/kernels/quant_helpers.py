"""Random quantized weights of every kind, for the kernel tests (values in each kind's full range)."""
from __future__ import annotations

import torch

from llmchat.kernels.quant import QuantWeight

KINDS = ["q8", "q8h", "q4", "q5"]


def random_weight(kind: str, n: int, k: int, seed: int = 0, mins: bool = True) -> QuantWeight:
    g = torch.Generator().manual_seed(seed)
    nb = k // 32
    scales = torch.rand(n, 2 * nb if kind == "q8h" else nb, generator=g) * 0.02 + 1e-4
    if kind in ("q8", "q8h"):
        values = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        return QuantWeight(kind, values, scales, source=kind)
    values = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.int32).to(torch.uint8)
    high = torch.randint(-2**31, 2**31, (n, nb), generator=g, dtype=torch.int64).to(torch.int32) if kind == "q5" else None
    lows = -(torch.rand(n, nb, generator=g) * 0.1) if mins else None
    return QuantWeight(kind, values, scales, lows, high, source=kind)

"""Small-M linear (decode projections): out = x @ weight.T (+ bias), streaming the weight once per call.

Fast for M (tokens in the step) up to a few dozen: the weight is read once and every token of the
step reuses it from cache; output rows are split across torch's threads. For large M (prefill) a
blocked GEMM (oneDNN) is the better tool.

bf16 weights can be packed once at load (`pack_linear_weight`) into panels of 16 output rows,
[ceil(N/16), ceil(K/2), 32]: the kernel then runs one pair-dot per 16 outputs and k-pair with no horizontal
sums, VDPBF16PS on x86 with AVX512-BF16, four BFDOTs on ARM with bf16 (Graviton 3/4, Apple M2 and later).
Where the CPU has AMX (Sapphire Rapids and later), the same panels are the B tiles of TDPBF16PS for every step
size; on ARM with bf16, steps of two or more tokens run BFMMLA tiles (2 rows x 2 tokens x 4 k) over the same
panels and decode stays on BFDOT, each output taking the same operations on either, so a row's bits do not
depend on the step size. `packed_native()` says whether packing pays off here, `packed_isa()` which path runs them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._loader import require

PANEL = 16


def linear_small_m(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                   out: torch.Tensor | None = None, out_features: int | None = None) -> torch.Tensor:
    """x [M, K] (last dim contiguous); weight [N, K] contiguous or packed (then out or out_features
    gives N); bias [N] or None; one dtype (float32, bfloat16, float16). Returns out [M, N],
    accumulated in fp32 and rounded once."""
    require()
    if out is None:
        if x.dim() != 2 or weight.dim() not in (2, 3):
            raise ValueError(f"llmchat.kernels.linear_small_m: x must be 2-D and weight 2-D (or packed 3-D), got "
                             f"{tuple(x.shape)} and {tuple(weight.shape)}")
        n = weight.shape[0] if weight.dim() == 2 else out_features
        if n is None:
            raise ValueError("llmchat.kernels.linear_small_m: a packed weight needs out or out_features")
        out = torch.empty(x.shape[0], n, dtype=x.dtype, device=x.device)
    torch.ops.llmchat.linear_small_m(x, weight, bias, out)
    return out


def packed_native() -> bool:
    """True when this build has a native packed bf16 kernel: AVX512-BF16 on x86, NEON with bf16 on ARM
    (elsewhere packed weights run a slow portable loop, so the engine keeps them dense)."""
    require()
    return bool(torch.ops.llmchat.linear_packed_native())


def packed_isa() -> str:
    """What runs packed panels here: "avx512+bf16+amx" (AMX tiles), "avx512+bf16", "neon+bf16+bfmmla" (BFDOT
    panels for one token, BFMMLA tiles for more) or "scalar"."""
    require()
    return str(torch.ops.llmchat.packed_isa())


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor:
    """bf16 [N, K] -> panels [ceil(N/16), ceil(K/2), 32]: element [p, j, 2r + e] = weight[16p + r, 2j + e]
    (zero padded). Done once at load; the result is what linear_small_m streams."""
    if weight.dim() != 2 or weight.dtype != torch.bfloat16:
        raise ValueError(f"llmchat.kernels.pack_linear_weight: weight must be a 2-D bfloat16 tensor, got "
                         f"{weight.dtype} {tuple(weight.shape)}")
    n, k = weight.shape
    padded = F.pad(weight.detach(), (0, k % 2, 0, (-n) % PANEL))
    panels = padded.view(padded.shape[0] // PANEL, PANEL, padded.shape[1] // 2, 2)
    return panels.permute(0, 2, 1, 3).contiguous().view(panels.shape[0], panels.shape[2], 2 * PANEL)


def packed_rows(panels: torch.Tensor, ids: torch.Tensor, width: int) -> torch.Tensor:
    """Rows `ids` of the bf16 [N, width] weight that pack_linear_weight packed into `panels` (exact): lets a
    tied embedding read its token rows from the lm_head's panels instead of keeping a dense copy."""
    quad = panels.view(panels.shape[0], panels.shape[1], PANEL, 2)           # [p, j, r, e]
    rows = quad[torch.div(ids, PANEL, rounding_mode="floor"), :, ids % PANEL]  # [T, ceil(width/2), 2]
    return rows.reshape(ids.shape[0], -1)[:, :width].contiguous()


def register_fake() -> None:
    torch.library.register_fake("llmchat::linear_small_m", lambda *args, **kwargs: None)

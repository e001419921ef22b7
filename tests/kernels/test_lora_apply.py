"""llmchat.kernels.lora_apply against a per-token torch definition: random shapes, ranks, slices (some
untargeted), slots without LoRA, empty and back-to-back segments, base tokens between them, every dtype."""
from __future__ import annotations

import random

import pytest
import torch

import llmchat.kernels as K


def random_stack(rng: random.Random, g: torch.Generator, slots: int, in_f: int, slice_sizes: list[int], dtype):
    """Stacked weights with per-slot random ranks per slice (0 = slice not targeted)."""
    ranks = [[rng.choice([0, 1, 3, 4, 8, 16]) for _ in slice_sizes] for _ in range(slots)]
    ranks[0] = [0] * len(slice_sizes)                      # one slot has no LoRA on this projection
    R = max(1, max(sum(r) for r in ranks))
    a = torch.randn(slots, R, in_f, generator=g).to(dtype)
    b = torch.randn(slots, R, sum(slice_sizes), generator=g).to(dtype)   # garbage outside each slice's block
    rank_offsets = torch.tensor([[0, *torch.tensor(r).cumsum(0).tolist()] for r in ranks], dtype=torch.int32)
    slice_offsets = torch.tensor([0, *torch.tensor(slice_sizes).cumsum(0).tolist()], dtype=torch.int32)
    return a, b, rank_offsets, slice_offsets


def reference(x, out, a, b, rank_offsets, slice_offsets, segments):
    """The definition, in float64: only each slice's own rank rows and columns of B are used. Where bf16 runs on
    matrix tiles (K.lora_path() is not "vector"), h is rounded to bf16 before the expand, as the tiles round it."""
    want = out.double().clone()
    round_h = x.dtype == torch.bfloat16 and K.lora_path() != "vector"
    for slot, start, end in segments.tolist():
        ro = rank_offsets[slot].tolist()
        h = x[start:end].double() @ a[slot].double().T
        if round_h:
            h = h.to(torch.bfloat16).double()
        for i in range(len(ro) - 1):
            c0, c1 = int(slice_offsets[i]), int(slice_offsets[i + 1])
            if ro[i + 1] > ro[i]:
                want[start:end, c0:c1] += h[:, ro[i]:ro[i + 1]] @ b[slot, ro[i]:ro[i + 1], c0:c1].double()
    return want


def random_segments(rng: random.Random, slots: int, tokens: int) -> tuple[torch.Tensor, int]:
    """Ordered disjoint segments with gaps (base tokens) and empty ones; returns (segments, total tokens)."""
    rows, pos = [], 0
    for _ in range(rng.randint(1, 6)):
        pos += rng.choice([0, 0, 1, 3])                  # base-model tokens between adapters
        n = rng.choice([0, 1, 2, 5, tokens])
        rows.append((rng.randrange(slots), pos, pos + n))
        pos += n
    return torch.tensor(rows, dtype=torch.int32).view(-1, 3), pos + rng.choice([0, 2])


def packed(b, ro, so):
    """(b, rank_offsets, slice_offsets, slice_ranks) as the op takes them."""
    b_packed, slice_ranks = K.pack_lora_b(b, ro, so)
    return b_packed, ro, so, slice_ranks


TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seed", range(6))
def test_lora_apply_matches_per_token_definition(dtype, seed):
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    in_f = rng.choice([7, 32, 64, 100, 576])
    slice_sizes = rng.choice([[48], [48, 16, 16], [33, 5, 70], [64, 64], [1, 130]])
    slots = rng.randint(1, 5)
    a, b, ro, so = random_stack(rng, g, slots, in_f, slice_sizes, dtype)
    segments, T = random_segments(rng, slots, rng.choice([4, 9, 40]))
    x = torch.randn(T, in_f + 3, generator=g).to(dtype)[:, :in_f]          # strided rows
    out = torch.randn(T, sum(slice_sizes) + 5, generator=g).to(dtype)[:, :sum(slice_sizes)]
    want = reference(x, out, a, b, ro, so, segments)
    K.lora_apply(x, out, a, *packed(b, ro, so), segments)
    # one rounding of (out + delta) to the dtype: error relative to the magnitude of the sum
    scale = 1 + want.abs()
    assert ((out.double() - want).abs() / scale).max().item() <= TOL[dtype]


def test_untouched_rows_and_untargeted_slices_stay_bit_identical():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 4, 16, generator=g).bfloat16()
    b = torch.randn(2, 4, 24, generator=g).bfloat16()
    ro = torch.tensor([[0, 4, 4], [0, 0, 0]], dtype=torch.int32)      # slot 0: slice 0 only; slot 1: nothing
    so = torch.tensor([0, 8, 24], dtype=torch.int32)
    x = torch.randn(6, 16, generator=g).bfloat16()
    out = torch.randn(6, 24, generator=g).bfloat16()
    before = out.clone()
    K.lora_apply(x, out, a, *packed(b, ro, so), torch.tensor([[0, 1, 3], [1, 3, 5]], dtype=torch.int32))
    assert torch.equal(out[:, 8:], before[:, 8:])           # untargeted slice
    assert torch.equal(out[[0, 3, 4, 5]], before[[0, 3, 4, 5]])   # base token, slot 1 tokens, trailing base
    assert not torch.equal(out[1:3, :8], before[1:3, :8])


def test_pack_lora_b_keeps_each_slice_block_without_zeros():
    b = torch.arange(2 * 5 * 100, dtype=torch.float32).view(2, 5, 100) + 1
    ro = torch.tensor([[0, 2, 5], [0, 3, 3]], dtype=torch.int32)     # slot 1 does not target slice 1
    so = torch.tensor([0, 70, 100], dtype=torch.int32)
    b_packed, caps = K.pack_lora_b(b, ro, so)
    assert caps.tolist() == [3, 3]                          # the largest rank per slice over the slots
    assert b_packed.shape == (2, 2 * 3 * 64 + 1 * 3 * 64)  # slice 0: 2 panels of 3 x 64; slice 1: 1 panel
    panel = b_packed.view(2, -1, 64)                         # rows of 64: slice 0 panel 0 rows 0-2, panel 1 ...
    assert panel[1, 2, 5] == b[1, 2, 5]                     # slot 1, slice 0, row 2, column 5
    assert panel[0, 3 + 1, 69 - 64] == b[0, 1, 69]          # slot 0, slice 0, panel 1, row 1, column 69
    assert panel[0, 6 + 0, 0] == b[0, 2, 70]                # slot 0, slice 1 starts at its rank row 2
    assert panel[0, 3 + 2].abs().sum() == 0                 # slot 0 has rank 2 on slice 0: row 2 is padding
    assert panel[1, 6:].abs().sum() == 0                    # slot 1: nothing on slice 1
    assert panel[0, 3:5, 6:].abs().sum() == 0               # columns past slice 0's 70


def args(**over):
    a = dict(x=torch.randn(4, 16), out=torch.zeros(4, 24), a=torch.randn(2, 4, 16), b=torch.randn(2, 256),
             rank_offsets=torch.tensor([[0, 2, 4], [0, 0, 0]], dtype=torch.int32),
             slice_offsets=torch.tensor([0, 8, 24], dtype=torch.int32),
             slice_ranks=torch.tensor([2, 2], dtype=torch.int32),
             segments=torch.tensor([[0, 0, 2], [1, 2, 4]], dtype=torch.int32))
    a.update(over)
    return a


@pytest.mark.parametrize("over,message", [
    ({"x": torch.randn(4, 16).double()}, "x must be float32, bfloat16 or float16"),
    ({"a": torch.randn(2, 4, 16).bfloat16()}, "a must have the dtype of x"),
    ({"out": torch.zeros(3, 24)}, "out must have one row per row of x"),
    ({"a": torch.randn(2, 4, 15)}, "a must be [slots, rank, 16]"),
    ({"b": torch.randn(2, 255)}, "b must have shape [2, 256]"),
    ({"b": torch.randn(256, 2).T}, "b must be contiguous"),
    ({"slice_ranks": torch.tensor([1, 2], dtype=torch.int32), "b": torch.randn(2, 192)},
     "gives slice 0 more rank rows than slice_ranks allows (1)"),
    ({"slice_ranks": torch.tensor([2], dtype=torch.int32)}, "slice_ranks must have shape [2]"),
    ({"slice_offsets": torch.tensor([0, 8, 20], dtype=torch.int32)}, "slice_offsets must start at 0 and end at"),
    ({"slice_offsets": torch.tensor([0, 8, 24])}, "slice_offsets must be Int"),
    ({"rank_offsets": torch.tensor([[0, 2, 5], [0, 0, 0]], dtype=torch.int32)}, "rank_offsets row 0 must be"),
    ({"rank_offsets": torch.tensor([[0, 2, 1], [0, 0, 0]], dtype=torch.int32)}, "rank_offsets row 0 must be"),
    ({"rank_offsets": torch.zeros(3, 3, dtype=torch.int32)}, "rank_offsets must have shape"),
    ({"segments": torch.tensor([[2, 0, 2]], dtype=torch.int32)}, "segments slot must be in [0, 2)"),
    ({"segments": torch.tensor([[0, 0, 5]], dtype=torch.int32)}, "segments must be ordered, disjoint"),
    ({"segments": torch.tensor([[0, 0, 3], [1, 2, 4]], dtype=torch.int32)}, "segments must be ordered, disjoint"),
    ({"segments": torch.tensor([[0, 0, 3]], dtype=torch.int32).T.contiguous()}, "segments must be [N, 3]"),
])
def test_lora_apply_rejects_bad_inputs(over, message):
    with pytest.raises(ValueError, match="llmchat.kernels.lora_apply") as err:
        K.lora_apply(**args(**over))
    assert message in str(err.value)

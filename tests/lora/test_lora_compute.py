"""The grouped LoRA compute equals a per-token reference, for fused and plain projections, any token order,
on both paths: the torch path (fp32 grouped GEMMs, the oracle) and the fused kernel (llmchat.kernels.lora_apply
on weights stored in the model's dtype)."""
from __future__ import annotations

import random

import pytest
import torch
from lora_helpers import StepChunk, StepSeq

import llmchat.kernels as K
from llmchat.engine.lora.compute import build_site_weights, segments_from_runs, uniform_groups
from llmchat.engine.lora.manager import LoraManager
from llmchat.engine.lora.stack import SiteStack

OUT_SIZES = [48, 16, 16]          # a fused qkv: three slices
OFFSETS = [0, 48, 64, 80]
IN = 32
PATHS = ["torch", "fused"]


def random_slices(g: torch.Generator, rank: int, targeted: list[bool]):
    """Per slice: (out0, out1, A [r, in], scaled B [out_i, r]) or None when the slice is not targeted."""
    slices, out0 = [], 0
    for size, on in zip(OUT_SIZES, targeted):
        if on:
            a = torch.randn(rank, IN, generator=g)
            b = torch.randn(size, rank, generator=g) * 0.5
            slices.append((out0, out0 + size, a, b))
        else:
            slices.append(None)
        out0 += size
    return slices


def per_token_reference(x, base_out, token_slots, slices_by_slot):
    """The obvious (slow) definition: each token gets its own adapter's delta on each targeted slice."""
    out = base_out.clone()
    for t, slot in enumerate(token_slots):
        if slot < 0:
            continue
        for s in slices_by_slot[slot]:
            if s is not None:
                out0, out1, a, b = s
                out[t, out0:out1] += (x[t] @ a.T) @ b.T
    return out


def empty_stack(path: str, dtype: torch.dtype) -> SiteStack:
    if path == "torch":
        return SiteStack(IN, OFFSETS)                                       # fp32 weights, dense b
    return SiteStack(IN, OFFSETS, dtype, pack_b=K.pack_lora_b)              # the model's dtype, panels


def make_stack(seed: int, path: str = "torch", dtype: torch.dtype = torch.float32):
    """A fused-qkv stack with 4 slots: different ranks, different targeted slices, slot 3 without LoRA here."""
    g = torch.Generator().manual_seed(seed)
    targets = [[True, True, True], [True, False, True], [False, True, False], [False, False, False]]
    ranks = [4, 8, 2, 4]
    slices_by_slot = [random_slices(g, r, t) for r, t in zip(ranks, targets)]
    stack = empty_stack(path, dtype)
    for slot in (2, 0, 3, 1):                        # any order: the stack grows in slots and rank
        stack.put(slot, build_site_weights(to_dtype(slices_by_slot[slot], stack.dtype)))
    return stack, slices_by_slot, g


def to_dtype(slices, dtype):
    """What the engine stores (adapter.py converts at load); the reference keeps the unrounded weights."""
    return [None if s is None else (s[0], s[1], s[2].to(dtype), s[3].to(dtype)) for s in slices]


def run_case(stack, slices_by_slot, g, runs, dtype):
    token_slots = [slot for slot, n in runs for _ in range(n)]
    x = torch.randn(len(token_slots), IN, generator=g).to(dtype)
    out = torch.randn(len(token_slots), sum(OUT_SIZES), generator=g).to(dtype)
    expected = per_token_reference(x.float(), out.float(), token_slots, slices_by_slot)
    segments = segments_from_runs(runs)
    if stack.pack_b is None:
        stack.apply(x, out, segments, uniform_groups(segments))
    elif segments:
        stack.apply_fused(torch.ops.llmchat.lora_apply, x, out, torch.tensor(segments, dtype=torch.int32))
    tol = 1e-5 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grouped_deltas_equal_per_token_reference(seed, dtype, path):
    stack, slices_by_slot, g = make_stack(seed, path, dtype)
    rng = random.Random(seed)
    # Chunks in arbitrary order, adapters repeated and interleaved with the base model (-1).
    runs = [(rng.choice([-1, 0, 1, 2, 3]), rng.randint(1, 5)) for _ in range(9)]
    run_case(stack, slices_by_slot, g, runs, dtype)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_path_for_equal_groups_of_consecutive_slots(dtype, path):
    stack, slices_by_slot, g = make_stack(7, path, dtype)
    runs = [(-1, 3), (0, 2), (1, 2), (2, 2), (3, 2)]     # base first, then 2 tokens per adapter
    assert uniform_groups(segments_from_runs(runs)) == (0, 4, 3, 2)
    run_case(stack, slices_by_slot, g, runs, dtype)


@pytest.mark.parametrize("path", PATHS)
def test_cleared_slot_contributes_nothing(path):
    stack, slices_by_slot, g = make_stack(3, path)
    stack.put(1, None)
    slices_by_slot[1] = [None, None, None]
    run_case(stack, slices_by_slot, g, [(0, 1), (1, 1), (2, 1)], torch.float32)


@pytest.mark.parametrize("path", PATHS)
def test_slot_refilled_with_a_smaller_rank_and_other_slices(path):
    stack, slices_by_slot, g = make_stack(4, path)
    slices_by_slot[0] = random_slices(g, 2, [False, False, True])   # was rank 4 on all three slices
    stack.put(0, build_site_weights(slices_by_slot[0]))
    stack.put(6, build_site_weights(slices_by_slot[2]))             # grows the slots; same weights as slot 2
    slices_by_slot += [[None] * 3, [None] * 3, slices_by_slot[2]]
    run_case(stack, slices_by_slot, g, [(0, 2), (-1, 1), (1, 1), (6, 3), (2, 1)], torch.float32)


def test_fused_and_torch_paths_agree_on_the_same_fp32_weights():
    fused, slices_by_slot, _ = make_stack(5, "fused")
    oracle, _, _ = make_stack(5, "torch")
    g = torch.Generator().manual_seed(9)
    x, out = torch.randn(9, IN, generator=g), torch.randn(9, sum(OUT_SIZES), generator=g)
    segments = segments_from_runs([(1, 3), (-1, 1), (0, 2), (2, 2), (3, 1)])
    want = out.clone()
    oracle.apply(x, want, segments, uniform_groups(segments))
    fused.apply_fused(torch.ops.llmchat.lora_apply, x, out, torch.tensor(segments, dtype=torch.int32))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_uniform_groups_needs_consecutive_slots_and_equal_sizes():
    assert uniform_groups([(0, 0, 2), (2, 2, 4)]) is None
    assert uniform_groups([(0, 0, 2), (1, 2, 5)]) is None
    assert uniform_groups([(1, 0, 1)]) is None
    assert uniform_groups([(1, 4, 5), (2, 5, 6), (3, 6, 7)]) == (1, 4, 4, 1)


def test_segments_merge_adjacent_runs_of_one_adapter_and_drop_base():
    runs = [(-1, 3), (0, 1), (0, 2), (1, 1), (-1, 2), (0, 1)]
    assert segments_from_runs(runs) == [(0, 3, 6), (1, 6, 7), (0, 9, 10)]
    assert segments_from_runs([(-1, 4)]) == []


def test_untargeted_projection_has_no_weights():
    assert build_site_weights([None, None]) is None


def test_group_chunks_makes_adapters_contiguous_and_restores_row_order():
    slots = [2, -1, 0, 2, -1, 0, 1]
    chunks = [StepChunk(StepSeq(s)) for s in slots]
    grouped, restore = LoraManager.group_chunks(chunks)
    assert [c.seq.adapter_slot for c in grouped] == sorted(slots)
    rows = torch.tensor([[float(c.seq.adapter_slot), float(i)] for i, c in enumerate(grouped)])
    back = rows.index_select(0, restore)
    assert [grouped[int(i)] for i in back[:, 1]] == chunks   # row i belongs to chunk i again


def test_group_chunks_keeps_sorted_batches_untouched():
    chunks = [StepChunk(StepSeq(s)) for s in (-1, -1, 0, 3)]
    grouped, restore = LoraManager.group_chunks(chunks)
    assert grouped is chunks and restore is None

"""torch.library.opcheck on every op: schemas (mutation annotations), fake impls, dispatch registrations."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels  # noqa: F401  (registers the ops and their fake impls)
from paged_batch import make_batch

OPS = torch.ops.llmchat


def attention_args():
    b = make_batch([(1, 20), (5, 5)], 4, 2, 32, 8, torch.float32)
    return (*b.args(), -1, torch.empty_like(b.query))


def grouped_attention_args():
    b = make_batch([(1, 40), (3, 3)], 4, 2, 32, 8, torch.float32, blocks_per_group=2)
    return (*b.args(), -1, torch.empty_like(b.query))


def cases():
    kc = torch.randn(4, 2, 8, 32)
    rot_q, rot_k = torch.randn(3, 4 * 32), torch.randn(3, 2 * 32)
    return {
        "paged_attention": attention_args(),
        "write_kv_cache": (torch.randn(3, 2, 32), torch.randn(3, 2, 32), kc, kc.clone(), torch.tensor([0, -1, 9])),
        "copy_blocks": ([kc.clone(), kc.clone()], [kc.clone(), kc.clone()], torch.tensor([[0, 1], [2, 3]])),
        "paged_attention_grouped": grouped_attention_args(),
        "rms_norm": (torch.randn(3, 64), torch.randn(64), 1e-6, torch.empty(3, 64)),
        "fused_add_rms_norm": (torch.randn(3, 64), torch.randn(3, 64), torch.randn(64), 1e-6),
        "rotary_embedding": (torch.tensor([0, 5, 9]), rot_q, rot_k, torch.randn(16, 32), 32, True),
        "silu_and_mul": (torch.randn(3, 64), torch.empty(3, 32)),
        "gelu_tanh_and_mul": (torch.randn(3, 64), torch.empty(3, 32)),
        "lora_apply": lora_args(),
        "decoder_stack": decoder_stack_args(),
        "gguf_tiles": gguf_tiles_args(),
    }


def lora_args():
    rank_offsets = torch.tensor([[0, 4, 4, 8], [0, 0, 0, 0]], dtype=torch.int32)
    slice_offsets = torch.tensor([0, 48, 64, 80], dtype=torch.int32)
    b, slice_ranks = llmchat.kernels.pack_lora_b(torch.randn(2, 8, 80), rank_offsets, slice_offsets)
    return (torch.randn(5, 32), torch.randn(5, 80), torch.randn(2, 8, 32), b, rank_offsets, slice_offsets, slice_ranks,
            torch.tensor([[0, 0, 2], [1, 3, 5]], dtype=torch.int32))


def gguf_tiles_args():
    """16 rows of one Q4_1 block each (20 bytes: fp16 d and m, 16 nibble bytes) into x86's tile layout (1)."""
    raw = torch.randint(0, 256, (16, 20), dtype=torch.uint8)
    raw[:, :4] = torch.tensor([0.01, -0.2], dtype=torch.float16).view(torch.uint8)
    return (raw.reshape(-1), 2, 16, 32, None, 1, False, torch.empty(16, 16, dtype=torch.uint8),
            torch.empty(0, dtype=torch.uint8), torch.empty(16, 1, dtype=torch.float16), torch.empty(16, 1, dtype=torch.float16))


def decoder_stack_args():
    H, D, hq, hkv, inter = 32, 16, 2, 1, 48  # one layer, plain fp32 weights, no biases, q/k head norms, output norms
    weights = [torch.randn(H), torch.randn(H), torch.randn((hq + 2 * hkv) * D, H), torch.randn(H, hq * D),
               torch.randn(2 * inter, H), torch.randn(H, inter)] + [torch.empty(0)] * 4 + [torch.randn(D), torch.randn(D)]
    weights += [torch.randn(H), torch.randn(H)]
    kc = torch.zeros(4, hkv, 8, D)
    return (torch.randn(3, H), torch.empty(3, H), weights, [-1], [kc], [kc.clone()], torch.tensor([0, 1, 2]),
            torch.tensor([8, 9, 10]), torch.tensor([[1, 0]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32),
            torch.tensor([0, 3], dtype=torch.int32), [torch.randn(16, 16)], hq, D, inter, 1e-6, 0.25, 0.5, True, [],
            torch.empty(0, 3, dtype=torch.int32), [], [])


@pytest.mark.parametrize("name", list(cases()))
def test_opcheck(name):
    op = name.removesuffix("_grouped")
    torch.library.opcheck(getattr(OPS, op).default, cases()[name])


def test_isa_reports_a_known_path():
    assert llmchat.kernels.isa() in {"avx512+bf16", "avx512", "avx2", "neon+bf16", "neon", "scalar"}
    assert OPS.isa() == llmchat.kernels.isa()

"""write_kv_cache and copy_blocks against index arithmetic in plain torch."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("block_size", [1, 16, 5])
def test_write_kv_cache(dtype, block_size):
    num_blocks, hkv, d, tokens = 10, 2, 32, 9
    kc = torch.zeros(num_blocks, hkv, block_size, d, dtype=dtype)
    vc = torch.zeros_like(kc)
    key = torch.randn(tokens, hkv, d).to(dtype)
    value = torch.randn(tokens, hkv, d).to(dtype)
    slots = torch.randperm(num_blocks * block_size)[:tokens]
    slots[3] = -1  # padding token: not written
    K.write_kv_cache(key, value, kc, vc, slots)
    want_k, want_v = torch.zeros_like(kc), torch.zeros_like(vc)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            want_k[slot // block_size, :, slot % block_size] = key[t]
            want_v[slot // block_size, :, slot % block_size] = value[t]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_write_kv_cache_from_fused_qkv_views():
    tokens, hkv, d = 4, 2, 16
    qkv = torch.randn(tokens, 3 * hkv * d)
    key = qkv[:, hkv * d:2 * hkv * d].view(tokens, hkv, d)
    value = qkv[:, 2 * hkv * d:].view(tokens, hkv, d)
    kc = torch.zeros(2, hkv, 4, d)
    vc = torch.zeros_like(kc)
    K.write_kv_cache(key, value, kc, vc, torch.arange(tokens))
    assert torch.equal(kc[0].transpose(0, 1), key) and torch.equal(vc[0].transpose(0, 1), value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_kv_cache_grouped_layout(dtype):
    groups, hkv, per_group, bs, d, tokens = 3, 2, 4, 8, 32, 40
    kc = torch.zeros(groups, hkv, per_group, bs, d, dtype=dtype)
    vc = torch.zeros_like(kc)
    key, value = torch.randn(tokens, hkv, d).to(dtype), torch.randn(tokens, hkv, d).to(dtype)
    slots = torch.randperm(groups * per_group * bs)[:tokens]
    K.write_kv_cache(key, value, kc, vc, slots)
    want_k, want_v = torch.zeros_like(kc), torch.zeros_like(vc)
    for t, slot in enumerate(slots.tolist()):
        block, offset = divmod(slot, bs)
        want_k[block // per_group, :, block % per_group, offset] = key[t]
        want_v[block // per_group, :, block % per_group, offset] = value[t]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_copy_blocks_grouped_layout():
    kc, vc = torch.randn(3, 2, 4, 8, 16), torch.randn(3, 2, 4, 8, 16)  # 12 blocks in groups of 4
    k0, v0 = kc.clone(), vc.clone()
    K.copy_blocks([kc], [vc], torch.tensor([[1, 6], [11, 4]]))
    want_k, want_v = k0.clone(), v0.clone()
    for src, dst in [(1, 6), (11, 4)]:
        want_k[dst // 4, :, dst % 4] = k0[src // 4, :, src % 4]
        want_v[dst // 4, :, dst % 4] = v0[src // 4, :, src % 4]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_copy_blocks_all_layers():
    layers = [(torch.randn(5, 2, 4, 16), torch.randn(5, 2, 4, 16)) for _ in range(3)]
    before = [(k.clone(), v.clone()) for k, v in layers]
    mapping = torch.tensor([[0, 3], [2, 4]])
    K.copy_blocks([k for k, _ in layers], [v for _, v in layers], mapping)
    for (k, v), (k0, v0) in zip(layers, before):
        want_k, want_v = k0.clone(), v0.clone()
        want_k[3], want_k[4], want_v[3], want_v[4] = k0[0], k0[2], v0[0], v0[2]
        assert torch.equal(k, want_k) and torch.equal(v, want_v)


def test_huge_page_hint_on_a_fresh_cache():
    from llmchat.kernels.memory import advise_huge_pages

    cache = torch.empty(64, 2, 16, 1024, dtype=torch.bfloat16)  # 4 MiB: holds at least one aligned 2 MiB page
    assert advise_huge_pages(cache) is True
    assert advise_huge_pages(torch.empty(16)) is False  # smaller than one huge page: nothing to advise

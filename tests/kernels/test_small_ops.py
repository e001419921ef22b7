"""rms_norm, fused_add_rms_norm, rotary_embedding, silu_and_mul, gelu_tanh_and_mul against plain torch (HF formulas)."""
from __future__ import annotations

import pytest
import torch

import llmchat.kernels as K

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def hf_rms_norm(x, weight, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def close(actual, expected, dtype):
    # fp32 tight; 16-bit types may differ by one rounding step of the stored value
    tol = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,hidden", [(1, 64), (7, 576), (33, 100), (5, 17)])
def test_rms_norm(dtype, tokens, hidden):
    x = torch.randn(tokens, hidden).to(dtype)
    w = (torch.rand(hidden) + 0.5).to(dtype)
    close(K.rms_norm(x, w, 1e-6), hf_rms_norm(x, w, 1e-6), dtype)


def test_rms_norm_bf16_matches_hf_bitwise_mostly():
    x = torch.randn(64, 576).bfloat16()
    w = (torch.rand(576) + 0.5).bfloat16()
    mismatch = (K.rms_norm(x, w, 1e-5) != hf_rms_norm(x, w, 1e-5)).float().mean().item()
    assert mismatch < 0.01  # the same rounding steps as HF; only sum-order differences remain


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,hidden", [(1, 64), (9, 576), (4, 50)])
def test_fused_add_rms_norm(dtype, tokens, hidden):
    x = torch.randn(tokens, hidden).to(dtype)
    residual = torch.randn(tokens, hidden).to(dtype)
    w = (torch.rand(hidden) + 0.5).to(dtype)
    want_residual = residual + x
    want_x = hf_rms_norm(want_residual, w, 1e-5)
    K.fused_add_rms_norm(x, residual, w, 1e-5)
    torch.testing.assert_close(residual, want_residual)
    close(x, want_x, dtype)


def gemma_rms_norm(x, weight_plus_one, eps):
    """transformers' Gemma3RMSNorm: fp32 throughout, (1 + w) in fp32, one rounding at the end."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight_plus_one).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_fp32_weight_is_gemmas_norm_rounded_once(dtype):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    x = (torch.randn(64, 640) * 3).to(dtype)
    w = (torch.randn(640) * 0.5).to(dtype)          # the checkpoint's w
    hf = Gemma3RMSNorm(640, eps=1e-6).to(dtype)
    hf.weight.data.copy_(w)
    want = hf(x)
    got = K.rms_norm(x, 1.0 + w.float(), 1e-6)
    assert got.dtype == dtype
    torch.testing.assert_close(got, gemma_rms_norm(x, 1.0 + w.float(), 1e-6))
    # the same single rounding as transformers: only sum-order differences remain (a Llama norm's weight in
    # the model dtype, 1 + w rounded, differs in about a third of the values)
    assert (got != want).float().mean().item() < 0.01
    assert (K.rms_norm(x, (1.0 + w.float()).to(dtype), 1e-6) != want).float().mean().item() > 0.1
    residual, x2 = torch.randn(64, 640).to(dtype), x.clone()
    want_residual = residual + x
    K.fused_add_rms_norm(x2, residual, 1.0 + w.float(), 1e-6)
    torch.testing.assert_close(residual, want_residual, atol=0, rtol=0)
    assert (x2 != hf(want_residual)).float().mean().item() < 0.01


def test_rms_norm_on_strided_rows():
    base = torch.randn(6, 128)
    x = base[:, :64]  # rows with stride 128
    w = torch.rand(64) + 0.5
    close(K.rms_norm(x, w, 1e-6), hf_rms_norm(x, w, 1e-6), torch.float32)


def cos_sin_cache(max_pos, rot_dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, rot_dim, 2).float() / rot_dim))
    freqs = torch.outer(torch.arange(max_pos).float(), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference_rotary(positions, x, cache, head_size, is_neox):
    """HF apply_rotary_pos_emb (neox) or the GPT-J interleaved form, in fp32, on the first rot_dim dims."""
    t = x.shape[0]
    xf = x.float().reshape(t, -1, head_size)
    rot = cache.shape[1]
    cos, sin = cache[positions].chunk(2, dim=-1)  # [T, rot/2]
    xr, rest = xf[..., :rot], xf[..., rot:]
    if is_neox:
        c, s = torch.cat([cos, cos], -1)[:, None], torch.cat([sin, sin], -1)[:, None]
        out = xr * c + rotate_half(xr) * s
    else:
        c, s = cos[:, None], sin[:, None]
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    return torch.cat([out, rest], -1).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size,rot_dim", [(64, 64), (128, 128), (80, 80), (16, 16), (64, 32)])
def test_rotary_embedding(dtype, is_neox, head_size, rot_dim):
    tokens, hq, hkv = 11, 6, 2
    positions = torch.randint(0, 500, (tokens,))
    cache = cos_sin_cache(512, rot_dim)
    q = torch.randn(tokens, hq * head_size).to(dtype)
    k = torch.randn(tokens, hkv, head_size).to(dtype)  # 3-D form is accepted too
    want_q = reference_rotary(positions, q, cache, head_size, is_neox)
    want_k = reference_rotary(positions, k, cache, head_size, is_neox)
    K.rotary_embedding(positions, q, k, cache, head_size, is_neox)
    close(q, want_q, dtype)
    close(k, want_k, dtype)


def test_rotary_on_views_of_a_fused_qkv():
    tokens, hq, hkv, d = 5, 4, 2, 64
    qkv = torch.randn(tokens, (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    v_before = v.clone()
    positions = torch.arange(tokens) + 3
    cache = cos_sin_cache(64, d)
    want_q = reference_rotary(positions, q, cache, d, True)
    want_k = reference_rotary(positions, k, cache, d, True)
    K.rotary_embedding(positions, q, k, cache, d)
    close(q, want_q, torch.float32)
    close(k, want_k, torch.float32)
    assert torch.equal(v, v_before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,inter", [(1, 64), (6, 1536), (3, 40)])
def test_silu_and_mul(dtype, tokens, inter):
    x = (torch.randn(tokens, 2 * inter) * 4).to(dtype)
    want = torch.nn.functional.silu(x[:, :inter]) * x[:, inter:]
    close(K.silu_and_mul(x), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,inter", [(1, 64), (6, 1536), (3, 40)])
def test_gelu_tanh_and_mul(dtype, tokens, inter):
    x = (torch.randn(tokens, 2 * inter) * 4).to(dtype)
    want = torch.nn.functional.gelu(x[:, :inter], approximate="tanh") * x[:, inter:]
    close(K.gelu_tanh_and_mul(x), want, dtype)


def test_silu_and_mul_extremes_and_out():
    x = torch.tensor([[-200.0, -20.0, 0.0, 30.0, 2.0, 3.0, 4.0, 5.0]])
    out = torch.empty(1, 4)
    assert K.silu_and_mul(x, out=out) is out
    want = torch.nn.functional.silu(x[:, :4]) * x[:, 4:]
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)

"""Linear on the kernels backend: decode-size steps run kernels.linear_small_m, larger steps the GEMM
path (the oracle); both agree, the LoRA hook still sees every call, and the real engine uses it."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import llmchat.kernels as K
from llmchat.engine.config import DEFAULT_SMALL_M_MAX
from llmchat.engine.layers.linear import Linear


def make_layer(dtype, kernels, bias=True, n=(640, 128, 128), k=576):
    torch.manual_seed(0)
    layer = Linear(k, list(n), bias=bias, slice_names=["q_proj", "k_proj", "v_proj"], prefix="qkv_proj")
    layer.weight = torch.nn.Parameter(torch.randn(sum(n), k).to(dtype) * 0.05, requires_grad=False)
    layer.bias = torch.nn.Parameter(torch.randn(sum(n)).to(dtype), requires_grad=False) if bias else None
    dense = layer.weight.detach().clone()
    layer.finalize(kernels=kernels)
    return layer, dense


def test_extension_is_built():
    assert K.available(), K.load_error()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_small_steps_use_the_kernel_and_match_the_oracle(dtype, bias):
    layer, dense = make_layer(dtype, K, bias)
    oracle, _ = make_layer(dtype, None, bias)
    assert layer.small_m_weight is not None and oracle.small_m_weight is None
    if dtype == torch.bfloat16 and K.packed_native():
        assert layer.small_m_weight.dim() == 3  # packed panels
    for m in (1, 3, DEFAULT_SMALL_M_MAX, DEFAULT_SMALL_M_MAX + 1, 70):
        x = torch.randn(m, 576).to(dtype)
        want = F.linear(x.double(), dense.double(), None if layer.bias is None else layer.bias.double())
        for got in (layer(x), oracle(x)):
            err = ((got.double() - want).abs() / (1 + want.abs())).max().item()
            assert got.shape == (m, 896) and err < (1e-4 if dtype == torch.float32 else 1e-2), (m, err)


def test_lora_hook_runs_on_the_small_m_path():
    layer, _ = make_layer(torch.bfloat16, K)
    seen = []

    class Hook:
        def apply(self, lay, x, out):
            seen.append((lay, x.shape[0], out.shape))
            out[:, lay.slice_offsets[1]:lay.slice_offsets[2]] += 1000

    layer.lora = Hook()
    x = torch.randn(2, 576).bfloat16()
    out = layer(x)
    assert seen == [(layer, 2, (2, 896))]
    base = K.linear_small_m(x, layer.small_m_weight, layer.bias, out_features=896)
    assert torch.all(out[:, 640:768].float() - base[:, 640:768].float() > 900)
    assert torch.equal(out[:, :640], base[:, :640])


def test_the_real_engine_builds_small_m_weights_on_the_kernels_backend(tmp_path):
    from tiny_models import make_model

    from llmchat.engine import LLM, SamplingParams

    path = make_model(tmp_path / "m", "llama", dtype=torch.bfloat16)
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    outs = {}
    for backend in ("kernels", "torch"):
        llm = LLM(path, dtype="bfloat16", attention_backend=backend, kv_cache_gb=0.05)
        layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, Linear)]
        assert all((m.small_m_weight is not None) == (backend == "kernels") for m in layers)
        outs[backend] = llm.generate([[5, 6, 7, 8]], params)[0].token_ids
    assert len(outs["kernels"]) == 6 and len(outs["torch"]) == 6


def test_small_m_max_zero_runs_every_projection_on_the_library_gemm(tmp_path):
    """EngineConfig.small_m_max=0 (the A/B switch): no small-M weights, the same greedy tokens."""
    from tiny_models import make_model

    from llmchat.engine import LLM, SamplingParams

    path = make_model(tmp_path / "m", "llama")
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    outs = {}
    for small_m_max in (0, DEFAULT_SMALL_M_MAX):
        llm = LLM(path, dtype="float32", kv_cache_gb=0.05, small_m_max=small_m_max)
        layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, Linear)]
        assert all((m.small_m_weight is not None) == (small_m_max > 0) for m in layers)
        outs[small_m_max] = llm.generate([[5, 6, 7, 8]], params)[0].token_ids
    assert outs[0] == outs[DEFAULT_SMALL_M_MAX]

"""The "kernels" backend really runs llmchat.kernels and agrees with the torch reference (fp32 and bf16)."""
from __future__ import annotations

import torch
from model_harness import Blocks, Seq, greedy, make_runner, prompt, step

import llmchat.kernels as kernels
from llmchat.engine.attention import KernelAttention, TorchAttention
from llmchat.engine.layers.ops import KernelOps


def test_kernels_backend_uses_the_kernels(tiny_model_dir):
    assert kernels.available(), "llmchat.kernels is not built (pip install --no-build-isolation -e .)"
    runner = make_runner(tiny_model_dir("qwen3"), "kernels")
    attn = runner.model.model.layers[0].self_attn
    assert isinstance(attn.attn, KernelAttention) and isinstance(attn.ops, KernelOps)
    assert isinstance(make_runner(tiny_model_dir("qwen3"), "torch").model.model.layers[0].self_attn.attn,
                      TorchAttention)


def test_kernels_match_torch_backend_in_bf16(tiny_model_dir):
    folder = tiny_model_dir("llama")
    fast, ref = make_runner(folder, "kernels", "bfloat16"), make_runner(folder, "torch", "bfloat16")
    prompts = [prompt(n, n) for n in (4, 29, 17)]
    rows_fast = step(fast, Blocks(fast), [(Seq(i, p), len(p)) for i, p in enumerate(prompts)])
    rows_ref = step(ref, Blocks(ref), [(Seq(i, p), len(p)) for i, p in enumerate(prompts)])
    scale = rows_ref.abs().max()
    assert (rows_fast - rows_ref).abs().max() < 0.03 * scale
    assert torch.equal(rows_fast.argmax(-1), rows_ref.argmax(-1))


def test_kernels_and_torch_greedy_agree_fp32(tiny_model_dir):
    folder = tiny_model_dir("qwen2")
    prompts = [prompt(n, 50 + n) for n in (7, 40)]
    fast, ref = make_runner(folder, "kernels"), make_runner(folder, "torch")
    assert greedy(fast, Blocks(fast), prompts, 16, chunk=16)[0] == greedy(ref, Blocks(ref), prompts, 16, chunk=16)[0]

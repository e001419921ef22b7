"""Tiny GGUF models of every family and type mix run quantized in the engine: the kernels' greedy output
follows the engine's torch reference path on the same quantized weights, stays close to the fp32
dequantized model (transformers), and memory holds the file's size, not a dequantized copy."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gguf_models import FAMILIES, NEW_FAMILIES
from llmchat import kernels
from llmchat.kernels import quant_neon_layout as neon_layout
from llmchat.engine import LLM, SamplingParams
from llmchat.engine.layers.linear import Linear
from llmchat.engine.quant.quality import compare, sequence_logits

MESSAGES = [{"role": "user", "content": "Once upon a time there was a"}]


def greedy(llm, n=16):
    return llm.generate([MESSAGES], SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))[0]


def assert_follows(chosen: list[int], start: int, reference: torch.Tensor, tol: float) -> None:
    """Teacher-forced: at each generated position the reference's logit for the chosen token is within `tol`
    of its best one (the int8 activation rounding can only swap near-ties), and most are its argmax."""
    rows = reference[start - 1:start - 1 + len(chosen)]
    best, picked = rows.max(-1).values, rows[torch.arange(len(chosen)), torch.tensor(chosen)]
    assert torch.all(picked >= best - tol), (best - picked).tolist()
    assert (picked == best).float().mean() >= 0.8


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("mix", ["mixed", "q8_0", "q4_0"])
def test_kernels_follow_the_torch_reference_path(store, tiny_gguf, arch, mix):
    model = store.import_path(tiny_gguf(arch, mix))
    assert model.source == "gguf" and model.supported and model.quant is not None
    fast = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02)
    out = greedy(fast)
    ids = out.prompt_token_ids + out.token_ids
    ref = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02, attention_backend="torch")
    ref_logits = sequence_logits(ref, ids)
    scale = ref_logits.abs().max().item()
    assert_follows(out.token_ids, len(out.prompt_token_ids), ref_logits, tol=0.02 * scale)
    # the projections really run quantized: no dense copy of any quantized weight
    linears = [m for m in fast.engine.runner.model.modules() if isinstance(m, Linear)]
    assert linears and all(m.is_quantized and m.weight is None for m in linears)
    if kernels.tiles_native():  # x86 with AVX512-VNNI, or ARM: every weight of 16-row groups runs tiled
        runs = [w for m in linears for w in m.quantized_run_weights()]
        assert all(w.tiled == (w.n % 16 == 0 and neon_layout.takes(w.kind)) for w in runs) and any(w.tiled for w in runs)


@pytest.mark.parametrize("arch", FAMILIES)
def test_close_to_the_fp32_dequantized_model(store, tiny_gguf, arch):
    gguf = tiny_gguf(arch, "mixed")
    model = store.import_path(gguf)
    llm = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02)
    ids = greedy(llm).prompt_token_ids * 3
    config = AutoConfig.from_pretrained(str(model.path))   # transformers' GGUF config misses qwen3's head_dim
    hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, config=config,
                                              dtype=torch.float32)
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
    q = compare(want, sequence_logits(llm, ids))
    assert q["kl_divergence"] < 0.01 and q["top1_agreement"] >= 0.9, q


def test_resident_weights_are_about_the_file_size(store, tiny_gguf, tiny_source):
    gguf = tiny_gguf("llama", "mixed")
    llm = LLM(str(store.import_path(gguf).path), dtype="float32", kv_cache_gb=0.02)
    weights = llm.engine.runner.model.weight_bytes()
    assert weights <= 1.5 * gguf.stat().st_size   # fp32 block factors: a little over the file, never dense
    assert weights < 0.4 * (tiny_source("llama") / "model.safetensors").stat().st_size   # the fp32 original


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bf16_and_fp32_activations_both_run(store, tiny_gguf, dtype):
    llm = LLM(str(store.import_path(tiny_gguf("qwen3", "mixed")).path), dtype=dtype, kv_cache_gb=0.02)
    out = greedy(llm, n=8)
    assert len(out.token_ids) == 8 and llm.engine.runner.dtype == getattr(torch, dtype)


@pytest.mark.parametrize("arch", FAMILIES + NEW_FAMILIES)   # phi3: its fused qkv / gate_up cut into slices
def test_the_decoder_stack_runs_quantized_layers_like_the_python_layers(store, tiny_gguf, arch):
    """The C++ decoder stack takes quantized projections (runs of mixed kinds): bit for bit the Python layers'
    output, and it serves every step size."""
    path = str(store.import_path(tiny_gguf(arch, "mixed")).path)
    fast = LLM(path, dtype="float32", kv_cache_gb=0.02)
    assert fast.engine.runner.model._stack is not None and fast.engine.runner.model._stack.quant
    python_layers = LLM(path, dtype="float32", kv_cache_gb=0.02, decoder_stack=False)
    assert python_layers.engine.runner.model._stack is None
    ids = greedy(fast).prompt_token_ids * 4
    assert torch.equal(sequence_logits(fast, ids), sequence_logits(python_layers, ids))
    assert greedy(fast).token_ids == greedy(python_layers).token_ids


@pytest.mark.skipif(not kernels.tiles_isa().startswith("avx512"), reason="16-bit activations are the x86 tile layout's")
def test_only_a_q8_0_model_takes_16_bit_activations(store, tiny_gguf):
    """A Q8_0 model (every weight Q8_0) runs at 16-bit activations, its table and head included; the Q8_0 table
    of a Q4_0 model keeps 8-bit ones, as its projections do (that file was chosen for speed)."""
    def weights(mix):
        model = LLM(str(store.import_path(tiny_gguf("llama", mix)).path), dtype="float32",
                    kv_cache_gb=0.02).engine.runner.model
        runs = [w for m in model.modules() if isinstance(m, Linear) and m.is_quantized
                for w in m.quantized_run_weights()]
        return runs, model.quantized_embedding
    runs, table = weights("q8_0")
    assert table.kind == "q8" and table.wide_activations and all(w.tiled and w.wide_activations for w in runs)
    runs, table = weights("q4_0")
    assert table.kind == "q8" and table.tiled and not table.wide_activations
    assert all(w.kind == "q4" and not w.wide_activations for w in runs)

"""A bf16 model's projections with an adapter: the fused kernel path (bf16 weights, the engine's default)
gives the fp32 torch path's outputs up to bf16 weight rounding, on every hooked projection; base tokens of
the same batch are untouched."""
from __future__ import annotations

import pytest
import torch
from lora_helpers import StepChunk, StepSeq, make_adapter

from llmchat.engine import LLM


def projection_outputs(model, adapter, fused: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(outputs with the adapter on tokens 1..3, outputs of the base model) of every hooked projection."""
    llm = LLM(model, dtype="bfloat16", lora_fused=fused)
    lora = llm.engine.lora
    assert (lora.fused_op is not None) == fused
    assert lora.weights_dtype == (torch.bfloat16 if fused else torch.float32)
    llm.load_adapter("a", adapter)
    slot, _ = lora.acquire("a")
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(4, layer.in_features, generator=g).bfloat16() for layer in lora.layers]
    with torch.inference_mode():
        lora.set_step([StepChunk(StepSeq(-1), 1), StepChunk(StepSeq(slot), 3)])
        with_lora = [layer(x) for layer, x in zip(lora.layers, inputs)]
        lora.set_step([StepChunk(StepSeq(-1), 4)])
        base = [layer(x) for layer, x in zip(lora.layers, inputs)]
    return with_lora, base


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fused_bf16_path_matches_fp32_torch_path(arch, tiny_model_dir, tmp_path):
    model = tiny_model_dir(arch)
    adapter = make_adapter(model, tmp_path / "a", r=8, alpha=16, seed=5)
    fused, base = projection_outputs(model, adapter, True)
    oracle, _ = projection_outputs(model, adapter, False)
    for got, want, plain in zip(fused, oracle, base):
        assert torch.equal(got[0], plain[0])                       # the base-model token
        delta = (want[1:].float() - plain[1:].float()).abs().max().item()
        assert delta > 0.05                                          # the adapter really changes these rows
        # bf16 weights instead of fp32: a relative error of a few 2^-8 on the delta, plus one bf16 rounding
        torch.testing.assert_close(got[1:].float(), want[1:].float(), rtol=2e-2, atol=2e-2 * delta)

"""GGUF files of the newer families (granite, phi3, smollm3, gemma3; issue 18), written in the test as llama.cpp's
converter writes them: an F32 file is lossless, so the engine's greedy replies to several concurrent prompts
equal transformers' on the source folder token for token; quantized files run on the kernels like the engine's
torch reference path on the same weights. The older families' tests are test_gguf_models.py."""
from __future__ import annotations

import pytest
import torch
from test_gguf_models import assert_follows, greedy
from transformers import AutoModelForCausalLM

from gguf_models import NEW_FAMILIES
from llmchat.engine import LLM, SamplingParams
from llmchat.engine.quant.quality import sequence_logits

PROMPTS = [[5, 17, 42, 99, 120, 7, 8, 9] * 3, [33, 34, 35], list(range(40, 90))]


def hf_greedy(folder, prompt: list[int], max_new: int) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new, eos_token_id=None)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("arch", NEW_FAMILIES)
def test_an_f32_file_replies_as_transformers_on_the_source(store, tiny_gguf, tiny_source, arch):
    model = store.import_path(tiny_gguf(arch, "f32"))
    assert model.supported and model.source == "gguf"
    llm = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02, max_num_batched_tokens=32)
    outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    for prompt, out in zip(PROMPTS, outputs):
        assert out.token_ids == hf_greedy(tiny_source(arch), prompt, 12)


@pytest.mark.parametrize("arch", NEW_FAMILIES)
def test_quantized_files_follow_the_torch_reference_path(store, tiny_gguf, arch):
    model = store.import_path(tiny_gguf(arch, "mixed"))
    fast = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02)
    out = greedy(fast)
    ids = out.prompt_token_ids + out.token_ids
    ref_logits = sequence_logits(LLM(str(model.path), dtype="float32", kv_cache_gb=0.02, attention_backend="torch"), ids)
    assert_follows(out.token_ids, len(out.prompt_token_ids), ref_logits, tol=0.02 * ref_logits.abs().max().item())
    assert torch.isfinite(ref_logits).all()

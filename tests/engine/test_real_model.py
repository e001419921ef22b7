"""The real SmolLM2-135M-Instruct: greedy chat replies equal transformers' token for token (fp32)."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import hf_greedy, hf_model
from real_model import smollm2_folder

from llmchat.engine import LLM, SamplingParams

SYSTEM = "You are a concise, friendly assistant. Answer in one short sentence and never use lists."
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three colors."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 2?"}],
]
MAX_NEW = 16


@pytest.fixture(scope="module")
def folder():
    return smollm2_folder()


def test_greedy_chat_replies_equal_transformers(folder):
    llm = LLM(folder, dtype="float32", kv_cache_gb=0.25, max_num_batched_tokens=64)   # default attention
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0)
    outs = llm.generate(CHATS[:3], params) + llm.generate(CHATS[3:], params)   # the last reuses a prefix
    for chat, out in zip(CHATS, outs):
        rendered = llm.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert out.prompt_token_ids == llm.tokenizer(rendered, add_special_tokens=False).input_ids
        assert out.token_ids == hf_greedy(folder, out.prompt_token_ids, MAX_NEW)
        assert out.text == llm.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        assert out.text.strip()
    assert outs[3].metrics.num_cached_tokens > 0     # the shared system prompt was reused


def test_bf16_default_backend_reply_is_sane(folder):
    """bf16 rounds differently from fp32 (here "The" and "L" are 0.08 apart in fp32 logits), so ask only
    that each of the first bf16 tokens is among fp32 transformers' top 3 on the bf16 reply's own prefix."""
    llm = LLM(folder, dtype="bfloat16", kv_cache_gb=0.25)
    out = llm.generate(CHATS[:1], SamplingParams(max_tokens=MAX_NEW, temperature=0.0))[0]
    assert out.text.strip()
    model = hf_model(str(folder))
    ids = out.prompt_token_ids + out.token_ids
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0]
    n = len(out.prompt_token_ids)
    for i, token in enumerate(out.token_ids[:6]):
        assert token in logits[n - 1 + i].topk(3).indices.tolist(), (i, token)

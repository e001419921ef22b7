"""The real SmolLM2-135M-Instruct: the engine's greedy reply equals transformers' token for token."""
from __future__ import annotations

from model_harness import Blocks, greedy, hf_greedy, hf_model, make_runner
from real_model import smollm2_folder
from transformers import AutoTokenizer


def test_smollm2_greedy_30_tokens_equal_transformers():
    folder = smollm2_folder()
    tok = AutoTokenizer.from_pretrained(folder)
    chats = [[{"role": "user", "content": "What is the capital of France?"}],
             [{"role": "user", "content": "Write a haiku about the sea."}]]
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
               for c in chats]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) else list(p) for p in prompts]
    runner, hf = make_runner(folder), hf_model(folder)
    assert runner.model.lm_head.weight is runner.model.model.embed_tokens.weight  # tied
    tokens, _ = greedy(runner, Blocks(runner, num_blocks=16), prompts, max_new=30, chunk=32)
    for ids, got in zip(prompts, tokens):
        want, _ = hf_greedy(hf, ids, 30)
        assert got == want, (tok.decode(got), tok.decode(want))
    assert "Paris" in tok.decode(tokens[0])

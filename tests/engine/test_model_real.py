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
    hf = hf_model(folder)
    wants = [hf_greedy(hf, ids, 30)[0] for ids in prompts]
    assert "Paris" in tok.decode(wants[0])
    for backend in ("torch", "kernels"):
        runner = make_runner(folder, backend)
        assert runner.model.lm_head.weight is runner.model.model.embed_tokens.weight  # tied
        tokens, _ = greedy(runner, Blocks(runner, num_blocks=16), prompts, max_new=30, chunk=32)
        for got, want in zip(tokens, wants):
            assert got == want, (backend, tok.decode(got), tok.decode(want))

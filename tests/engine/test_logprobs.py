"""Logprobs of sampled tokens: the model's log_softmax (transformers' logits), only for rows that ask."""
from __future__ import annotations

import torch
from engine_helpers import hf_model, random_prompt

from llmchat.engine import LLM, SamplingParams


def test_logprobs_match_transformers_and_only_where_asked(tiny_model_dir):
    folder = tiny_model_dir("llama")
    llm = LLM(folder, attention_backend="torch")
    prompt = random_prompt(12, seed=5)
    engine = llm.engine
    asked = engine.add_request(prompt, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, logprobs=3))
    plain = engine.add_request(prompt, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    got: dict[str, list] = {asked.request_id: [], plain.request_id: []}
    while engine.has_unfinished():
        for delta in engine.step():
            got[delta.request_id].append(delta)
    entries = [e for d in got[asked.request_id] for e in d.logprobs or []]
    assert all(d.logprobs is None for d in got[plain.request_id])
    tokens = asked.output_token_ids
    assert [e.token_id for e in entries] == tokens
    with torch.inference_mode():
        logits = hf_model(str(folder))(torch.tensor([prompt + tokens])).logits[0].float()
    reference = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    for i, e in enumerate(entries):
        torch.testing.assert_close(torch.tensor(e.logprob), reference[i, tokens[i]], atol=1e-4, rtol=0)
        top = reference[i].topk(3)
        assert [t for t, _ in e.top] == top.indices.tolist()
        torch.testing.assert_close(torch.tensor([lp for _, lp in e.top]), top.values, atol=1e-4, rtol=0)


def test_logprobs_zero_gives_the_chosen_token_only(tiny_model_dir):
    llm = LLM(tiny_model_dir("llama"), attention_backend="torch")
    engine = llm.engine
    seq = engine.add_request(random_prompt(8, seed=6), SamplingParams(max_tokens=3, temperature=0.7, seed=1,
                                                                      logprobs=0))
    entries = []
    while engine.has_unfinished():
        entries += [e for d in engine.step() for e in d.logprobs or []]
    assert len(entries) == 3 and all(e.top == [] and e.logprob <= 0 for e in entries)
    assert [e.token_id for e in entries] == seq.output_token_ids

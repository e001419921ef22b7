"""A draft model guesses where the text offers no n-gram, and the reply keeps the model's own tokens: greedy and
seeded replies are token-identical, each emitted token's logits row bit-identical, with a draft and without,
alone, batched in 16-token budgets, preempted, and with a draft cache too small for every sequence; a draft that
agrees with the model has its guesses held, one that does not has them refused; only confirmed tokens reach
the draft's prefix cache; a finished sequence's draft blocks go back; a draft with another tokenizer, or
larger than its model, is refused."""
from __future__ import annotations

import random

import pytest
from det_helpers import first_difference, kv_gb_for_blocks, make_llm, run
from tiny_models import make_model, make_tokenizer

from llmchat.engine.llm import LLM
from llmchat.engine.sampling_params import SamplingParams


def prompts() -> list[list[int]]:
    """Text with no repeats to look up (the n-gram guesser has nothing): the draft model guesses."""
    rng = random.Random(8)
    return [[rng.randrange(3, 300) for _ in range(n)] for n in (5, 23, 61)]


def params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True),
            SamplingParams(max_tokens=20, temperature=0.8, seed=11, ignore_eos=True),
            SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)]


@pytest.fixture(scope="module")
def drafts(tiny_model_dir, tmp_path_factory):
    """The target itself (every greedy guess holds) and a one-layer model of other weights (most are refused)."""
    root = tmp_path_factory.mktemp("drafts")
    return {"same": tiny_model_dir("llama"),
            "other": make_model(root / "other", "llama", seed=7, num_hidden_layers=1)}


@pytest.mark.parametrize("which", ["same", "other"])
def test_a_draft_changes_no_token_and_no_logit(tiny_model_dir, drafts, which):
    folder = tiny_model_dir("llama")
    ps, sps = prompts(), params()
    llm, rec = make_llm(folder, "float32", enable_prefix_caching=False, speculative="off")
    want = [run(llm, rec, [p], [sp])[0] for p, sp in zip(ps, sps)]

    conditions = [("alone", {}), ("budget 16", {"max_num_batched_tokens": 16}),
                  ("preempted", {"kv_cache_gb": kv_gb_for_blocks(folder, 7, itemsize=4)}),
                  ("small draft cache", {"draft_kv_cache_gb": kv_gb_for_blocks(drafts[which], 4, itemsize=4)})]
    for label, config in conditions:
        llm, rec = make_llm(folder, "float32", speculative="auto", draft_model=drafts[which], **config)
        if label == "alone":
            got = [run(llm, rec, [p], [sp])[0] for p, sp in zip(ps, sps)]
        else:
            got = run(llm, rec, ps, sps)
        problem = first_difference(got, want)
        assert problem is None, f"{which} draft, {label}: {problem}"
        m = llm.metrics()
        assert m.spec_verifications > 0, label
        if which == "same" and label == "alone":   # the greedy replies' guesses are the model's own tokens
            assert m.spec_accepted_tokens > 0.5 * m.spec_guessed_tokens, (label, m)
        if label == "preempted":
            assert m.num_preemptions > 0
        draft = llm.engine.draft
        assert not draft.shadows and draft.blocks.num_used_blocks == 0, f"{label}: draft blocks held after the replies"


def test_only_confirmed_tokens_reach_the_drafts_prefix_cache(tiny_model_dir, drafts):
    """Every block the draft cached holds the text of a reply as the model wrote it (a refused guess never), and a
    request repeating a prompt and its reply finds them."""
    folder = tiny_model_dir("llama")
    llm = LLM(folder, dtype="float32", num_threads=2, kv_cache_gb=0.05, draft_model=drafts["other"])
    outs = llm.generate(prompts(), params())
    texts = [p + o.token_ids for p, o in zip(prompts(), outs)]
    blocks = llm.engine.draft.blocks
    cached = [b for b in blocks.blocks if b.hash is not None]
    assert cached
    bs = blocks.block_size
    confirmed = {tuple(t[i:i + bs]) for t in texts for i in range(0, len(t) - bs + 1, bs)}
    assert all(b.token_ids in confirmed for b in cached)
    assert llm.metrics().spec_guessed_tokens > llm.metrics().spec_accepted_tokens   # guesses were refused
    again = llm.generate([texts[2][:-1]], [SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)])
    assert again[0].token_ids[0] == texts[2][-1]
    assert blocks.num_used_blocks == 0


def test_a_draft_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    other = make_model(tmp_path / "other-vocab", "llama", seed=3, num_hidden_layers=1)
    tok = make_tokenizer()
    tok.add_tokens(["<|a-token-only-the-draft-has|>"])
    tok.save_pretrained(other)
    with pytest.raises(ValueError, match="another tokenizer"):
        LLM(tiny_model_dir("llama"), dtype="float32", kv_cache_gb=0.05, draft_model=other)
    with pytest.raises(ValueError, match="draft_kv_cache_gb"):
        LLM(tiny_model_dir("llama"), dtype="float32", kv_cache_gb=0.05, draft_model=other, draft_kv_cache_gb=0)


def test_a_draft_larger_than_its_model_is_refused(tiny_model_dir, drafts, tmp_path):
    small = drafts["other"]   # one layer
    with pytest.raises(ValueError, match="larger than the model it drafts for"):
        LLM(small, dtype="float32", kv_cache_gb=0.05, draft_model=tiny_model_dir("llama"))

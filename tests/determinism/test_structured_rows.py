"""Constrained requests keep the determinism guarantee: the same tokens and the same (masked) logits, bit for
bit, alone, batched with others, in 16-token prefill chunks and preempted (recomputed) under a small KV budget."""
from __future__ import annotations

from det_helpers import (
    PREFIX,
    first_difference,
    kv_gb_for_blocks,
    make_llm,
    other_requests,
    run,
    target_prompts,
)

from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.structured_outputs import StructuredOutputs

SCHEMA = {"type": "object", "required": ["k", "v"], "additionalProperties": False,
          "properties": {"k": {"type": "string", "maxLength": 5}, "v": {"type": "array", "maxItems": 4,
                                                                      "items": {"type": "integer", "maximum": 999}}}}


def constrained_params() -> list[SamplingParams]:
    schema = StructuredOutputs(json=SCHEMA)
    return [SamplingParams(max_tokens=40, temperature=0.0, structured_outputs=schema),
            SamplingParams(max_tokens=40, temperature=0.9, seed=1234, structured_outputs=schema),
            SamplingParams(max_tokens=40, temperature=0.7, top_p=0.9, seed=99,
                           structured_outputs=StructuredOutputs(regex=r"[a-z ]{4,30}\."))]


def test_constrained_requests_give_the_same_bits_whatever_the_engine_does(tiny_model_dir):
    folder = tiny_model_dir("llama")
    prompts, params = target_prompts(), constrained_params()
    llm, rec = make_llm(folder, "float32", enable_prefix_caching=False)
    want = [run(llm, rec, [p], [sp])[0] for p, sp in zip(prompts, params)]
    assert all(len(w.tokens) > 3 for w in want)
    assert any(not w.logits.isfinite().all() for w in want)   # the sampler saw masked rows

    def check(label, got):
        problem = first_difference(got, want)
        assert problem is None, f"{label}: {problem}"

    llm, rec = make_llm(folder, "float32")
    run(llm, rec, [PREFIX + [5, 6, 7]], [params[0]])
    check("prefix cache hit", [run(llm, rec, [p], [sp])[0] for p, sp in zip(prompts, params)])

    llm, rec = make_llm(folder, "float32", max_num_batched_tokens=16)
    check("budget 16", run(llm, rec, prompts, params))

    o_prompts, o_params, _ = other_requests(12, [None])
    llm, rec = make_llm(folder, "float32")
    got = run(llm, rec, o_prompts[:6] + prompts + o_prompts[6:], o_params[:6] + params + o_params[6:])
    check("batched with 12 others", got[6:9])

    llm, rec = make_llm(folder, "float32", kv_cache_gb=kv_gb_for_blocks(folder, 14, itemsize=4))
    got = run(llm, rec, prompts + o_prompts[:4], params + o_params[:4])
    check("preempted", got[:3])
    assert llm.metrics().num_preemptions > 0

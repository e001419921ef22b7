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


def test_constrained_requests_guess_and_keep_their_bits(tiny_model_dir):
    """Speculation on constrained rows: a guess is verified only where the grammar allows it, each guessed
    row is masked as the grammar stands after the guesses before it, and the tokens and masked logits equal
    those without guessing, alone and batched with unconstrained guessing neighbours, greedy and seeded."""
    folder = tiny_model_dir("llama")
    repeating = StructuredOutputs(regex=r"(ab cd ef )+gh\.")
    params = [SamplingParams(max_tokens=48, temperature=0.0, structured_outputs=repeating),
              SamplingParams(max_tokens=48, temperature=0.8, seed=5, structured_outputs=repeating),
              *constrained_params()]
    prompts = target_prompts()[:2] + target_prompts()
    llm, rec = make_llm(folder, "float32", speculative="off")
    want = [run(llm, rec, [p], [sp])[0] for p, sp in zip(prompts, params)]
    # one thread: the masks are filled on llguidance's pool beside the pass (its draft-token call), two: on
    # the engine thread, guess by guess
    for label, batch, threads in (("alone", False, 2), ("batched", True, 2), ("one thread", True, 1)):
        llm, rec = make_llm(folder, "float32", threads=threads, speculative="ngram")
        if batch:
            loop = [21, 22, 23, 24, 25, 26] * 6
            got = run(llm, rec, prompts + [loop], params + [SamplingParams(max_tokens=30, temperature=0.0)])[:-1]
        else:
            got = [run(llm, rec, [p], [sp])[0] for p, sp in zip(prompts, params)]
        problem = first_difference(got, want)
        assert problem is None, f"{label}: {problem}"
        assert llm.metrics().spec_accepted_tokens > 0, label
    outs = make_llm(folder, "float32", speculative="ngram")[0].generate(prompts[:1], params[:1])
    assert outs[0].metrics.num_accepted_guesses > 0           # the constrained row itself guessed and held

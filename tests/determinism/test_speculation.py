"""Draft-free speculative decoding gives the model's own tokens: greedy and seeded replies are token-identical
with guessing on and off, and each emitted token's logits row is bit-identical to the one a plain decode step
scores, alone, batched with others (LoRA adapters among them), in 16-token budgets, preempted and on one
thread; unseeded draws keep the model's distribution."""
from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from det_helpers import first_difference, kv_gb_for_blocks, make_llm, run

from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.step_costs import StepCosts

sys.path.insert(0, str(Path(__file__).parent.parent / "lora"))
from lora_helpers import make_adapter  # noqa: E402

LOOP = [21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32]


def prompts() -> list[list[int]]:
    """Text that repeats (what guessing feeds on: quoted code, edited documents), and text that does not."""
    rng = random.Random(3)
    return [LOOP * 4, [7, 8, 9] + LOOP * 2 + [40, 41] + LOOP[:6], [rng.randrange(3, 300) for _ in range(50)]]


def params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True),
            SamplingParams(max_tokens=24, temperature=0.8, seed=11, ignore_eos=True),
            SamplingParams(max_tokens=24, temperature=0.7, top_p=0.9, seed=5, repetition_penalty=1.1,
                           ignore_eos=True)]


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("spec-adapters")
    return [make_adapter(tiny_model_dir("llama"), root / name, seed=seed, r=4) for name, seed in (("a", 1), ("b", 2))]


def _load(llm, adapter_paths):
    for name, path in zip("ab", adapter_paths):
        llm.load_adapter(name, path)


def test_guessing_changes_no_token_and_no_logit(tiny_model_dir, adapters):
    folder = tiny_model_dir("llama")
    ps, sps, names = prompts(), params(), [None, "a", "b"]
    llm, rec = make_llm(folder, "float32", enable_prefix_caching=False, speculative="off")
    _load(llm, adapters)
    want = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(ps, sps, names)]

    def check(label, llm, rec, got):
        problem = first_difference(got, want)
        assert problem is None, f"{label}: {problem}"

    guessed = 0
    conditions = [("alone", {}), ("budget 16", {"max_num_batched_tokens": 16}), ("1 thread", {"threads": 1}),
                  ("preempted", {"kv_cache_gb": kv_gb_for_blocks(folder, 12, itemsize=4)})]
    for label, config in conditions:
        llm, rec = make_llm(folder, "float32", speculative="ngram", **config)
        _load(llm, adapters)
        if label == "alone":
            got = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(ps, sps, names)]
        else:
            extra = [LOOP[:5] * 3, [9] * 40, LOOP * 3]
            got = run(llm, rec, ps + extra, sps + [sps[0], sps[1], sps[0]], names + [None, "a", "b"])[:3]
        check(label, llm, rec, got)
        m = llm.metrics()
        guessed += m.spec_verifications
        assert m.spec_accepted_tokens > 0 and m.spec_tokens_per_verification > 1, label
        if label == "preempted":
            assert m.num_preemptions > 0
    assert guessed > 20


def test_guesses_never_reach_the_prefix_cache_and_reused_blocks_give_the_same_reply(tiny_model_dir):
    """After a guessing reply, a request repeating its prompt and reply hits its full blocks in the prefix
    cache (accepted tokens only were hashed) and goes on exactly as a cold engine does."""
    folder = tiny_model_dir("llama")
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    llm, rec = make_llm(folder, "float32", speculative="ngram")
    first = run(llm, rec, [LOOP * 3], [greedy])[0]
    follow = LOOP * 3 + first.tokens + [5, 6]
    warm = llm.generate([follow], greedy)[0]
    assert warm.metrics.num_cached_tokens >= (len(follow) - 1) // 16 * 16 - 16
    cold_llm, _ = make_llm(folder, "float32", speculative="off", enable_prefix_caching=False)
    assert warm.token_ids == cold_llm.generate([follow], greedy)[0].token_ids


def test_unseeded_draws_keep_the_models_distribution(tiny_model_dir):
    """The 2nd generated token (the first a guess can give) of 600 unseeded replies with guessing on against 600 seeded ones without (each
    seed an exact draw from the model): a chi-square test of homogeneity. The shared generator is seeded so the
    test gives the same verdict on every run."""
    folder = tiny_model_dir("llama")
    n, position = 600, 1
    llm, _ = make_llm(folder, "float32", speculative="ngram", max_num_seqs=64)
    # the model's own greedy loop, twice: its likeliest next tokens are in the prompt, so it gets guesses
    greedy = llm.generate([LOOP], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))[0].token_ids
    prompt = LOOP + greedy + greedy
    sample = SamplingParams(max_tokens=position + 3, temperature=0.6, top_k=4, ignore_eos=True)
    llm.engine.sampler.inner.shared_generator.manual_seed(1234)
    spec = Counter(o.token_ids[position] for o in llm.generate([prompt] * n, sample))
    m = llm.metrics()
    assert m.spec_verifications > n // 5 and m.spec_accepted_tokens > 30   # many draws went through verification
    plain_llm, _ = make_llm(folder, "float32", speculative="off", max_num_seqs=64)
    seeded = [SamplingParams(max_tokens=position + 3, temperature=0.6, top_k=4, seed=s, ignore_eos=True)
              for s in range(n)]
    plain = Counter(o.token_ids[position] for o in plain_llm.generate([prompt] * n, seeded))
    tokens = sorted(set(spec) | set(plain))
    assert len(tokens) >= 2, "the test needs a position the model is unsure about"
    table = torch.tensor([[spec[t] for t in tokens], [plain[t] for t in tokens]], dtype=torch.float64)
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    chi2 = ((table - expected) ** 2 / expected).sum()
    dof = len(tokens) - 1
    p_value = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), chi2 / 2).item()
    assert p_value > 1e-3, (dict(spec), dict(plain), p_value)


@pytest.mark.parametrize("engine_mode", ["off", "ngram"])
def test_a_request_switches_its_own_guessing(tiny_model_dir, engine_mode):
    """SamplingParams.speculative (a session's F3 setting) wins over the engine's: in one batch, a request set to
    off never guesses and one set to ngram guesses, whatever the engine's mode; the tokens are the same."""
    llm, _ = make_llm(tiny_model_dir("llama"), "float32", speculative=engine_mode)
    base = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    modes = [None, "off", "ngram"]
    outs = llm.generate([LOOP * 4] * 3, [SamplingParams(**{**vars(base), "speculative": m}) for m in modes])
    guessed = {m: o.metrics.num_guessed_tokens for m, o in zip(modes, outs)}
    assert guessed["off"] == 0 and guessed["ngram"] > 0
    assert (guessed[None] > 0) == (engine_mode == "ngram")
    assert outs[0].token_ids == outs[1].token_ids == outs[2].token_ids


def test_auto_guesses_for_a_few_sequences_and_not_in_a_crowd(tiny_model_dir):
    """auto guesses while at most AUTO_MAX_DECODES sequences are in the engine, running or waiting: with two
    running at a time and four more waiting, the two that run first do not guess (the waiting ones' prefills
    would share their steps), whereas two alone do; the tokens are the same."""
    from llmchat.engine.speculation import AUTO_MAX_DECODES
    llm, _ = make_llm(tiny_model_dir("llama"), "float32", speculative="auto", max_num_seqs=2)
    p = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    alone = llm.generate([LOOP * 4] * 2, p)
    crowd = llm.generate([LOOP * 4] * (AUTO_MAX_DECODES + 2), p)
    assert all(o.metrics.num_guessed_tokens > 0 for o in alone)
    first_done = sorted(crowd, key=lambda o: o.metrics.finish_time)[:2]
    assert [o.metrics.num_guessed_tokens for o in first_done] == [0, 0]
    assert all(o.token_ids == alone[0].token_ids for o in alone + crowd)


class MachineCosts(StepCosts):
    """Step costs of a machine whose decode steps cost `base` seconds plus `per_row` a row, whatever the engine
    times here (a fixed clock: the tiny model's real steps cost about the same at any row count)."""

    def __init__(self, base: float, per_row: float) -> None:
        super().__init__()
        self.seconds = {rows: base + per_row * rows for rows in (1, 4096)}

    def record(self, rows: int, seconds: float) -> None:
        pass


@pytest.mark.parametrize("base, per_row", [(1e-2, 1e-5), (0.0, 1e-2)])
def test_auto_follows_the_measured_cost_of_a_guessed_row(tiny_model_dir, base, per_row):
    """Where the engine has measured what a row costs, auto guesses by that: in a crowd of decoding sequences
    (past AUTO_MAX_DECODES) where rows are cheap (a Xeon's AMX tiles), and not even for one sequence where a
    row costs what a token does (no step cost but the rows'); the tokens are the same."""
    from llmchat.engine.speculation import AUTO_MAX_DECODES
    llm, _ = make_llm(tiny_model_dir("llama"), "float32", speculative="auto", max_num_seqs=8)
    llm.engine.step_costs = MachineCosts(base, per_row)
    p = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    cheap = base > 0
    crowd = llm.generate([LOOP * 4] * (AUTO_MAX_DECODES + 2), p)
    alone = llm.generate([LOOP * 4], p)
    assert all((o.metrics.num_guessed_tokens > 0) == cheap for o in crowd + alone), [o.metrics.num_guessed_tokens for o in crowd + alone]
    plain, _ = make_llm(tiny_model_dir("llama"), "float32", speculative="off")
    assert all(o.token_ids == plain.generate([LOOP * 4], p)[0].token_ids for o in crowd + alone)


def test_an_unknown_guessing_mode_is_refused():
    with pytest.raises(ValueError, match="speculative must be auto, ngram or off"):
        SamplingParams(speculative="always").validate()


def test_guessing_on_a_model_with_a_sliding_window_pool(tmp_path_factory):
    """Gemma 3's local layers keep their window only (hybrid_blocks.py): guessed rows write KV past the
    sequence's end in both pools and the window pool lets go of blocks by accepted tokens only; the tokens
    and logits stay those without guessing, in small budgets and preempted."""
    from tiny_models import make_model
    folder = make_model(tmp_path_factory.mktemp("gemma3-spec"), "gemma3", num_hidden_layers=3,
                        max_position_embeddings=2048,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    ps = [LOOP * 6, [7, 8, 9] + LOOP * 3 + [40, 41] + LOOP[:6], LOOP * 2 + [5] * 30, LOOP[::-1] * 5]
    sps = [SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True),
           SamplingParams(max_tokens=60, temperature=0.8, seed=11, ignore_eos=True)] * 2
    llm, rec = make_llm(folder, "float32", speculative="off")
    assert llm.engine.runner.window_layers == [0, 2]
    want = [run(llm, rec, [p], [sp])[0] for p, sp in zip(ps, sps)]
    block = llm.engine.runner.kv_block_bytes(1)
    for label, config in [("alone", {}), ("budget 16", {"max_num_batched_tokens": 16}),
                          ("preempted", {"kv_cache_gb": 14 * 3 * block / 2**30, "max_num_batched_tokens": 48})]:
        llm, rec = make_llm(folder, "float32", speculative="ngram", **config)
        got = run(llm, rec, ps, sps)
        assert first_difference(got, want) is None, label
        m = llm.metrics()
        assert m.spec_accepted_tokens > 0, label
        if label == "preempted":
            assert m.num_preemptions > 0


def test_a_guessing_sequences_blocks_are_hashed_on_their_own_tokens(tiny_model_dir):
    """Accepted guesses count as computed a moment before they join the sequence's tokens: every block hash
    must still be the chain of the block's final tokens, or the reply's later blocks are never found again."""
    from llmchat.engine.block_manager import chain_hash
    llm, _ = make_llm(tiny_model_dir("llama"), "float32", speculative="ngram")
    engine = llm.engine
    seq = engine.add_request(LOOP * 3, SamplingParams(max_tokens=80, temperature=0.0, ignore_eos=True))
    checked = 0
    while not seq.is_finished:
        engine.step()
        parent = None
        for i, h in enumerate(seq.block_hashes):
            parent = chain_hash(parent, tuple(seq.token_ids[i * 16:(i + 1) * 16]), seq.adapter_key)
            assert h == parent, f"block {i}"
            checked += 1
    assert seq.metrics.num_accepted_guesses > 20 and checked > 20

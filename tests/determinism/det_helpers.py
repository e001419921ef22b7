"""Determinism test helpers: run requests in a real engine under some condition (batch, cache, chunking,
preemption, threads) and keep each request's tokens and the fp32 logits it sampled from, bit for bit."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from llmchat.engine.llm import LLM
from llmchat.engine.sampling_params import SamplingParams

MAX_NEW = 10
PREFIX = [11, 200, 37, 45, 190, 66, 71, 5, 9, 120, 121, 122, 250, 8, 77, 3, 14, 15, 92, 65,
          101, 102, 103, 7, 88, 89, 130, 131, 44, 45, 46, 230, 33, 34, 35, 36, 180]   # 37 tokens: 2 blocks + 5


def target_prompts() -> list[list[int]]:
    """Prompts sharing PREFIX, of other lengths after it (inside a block, across blocks, several blocks)."""
    rng = random.Random(0)
    return [PREFIX + [rng.randrange(3, 300) for _ in range(n)] for n in (4, 27, 60)]


def target_params() -> list[SamplingParams]:
    """A greedy request and two seeded samplers (one with top-p): each must come out the same everywhere."""
    return [SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True),
            SamplingParams(max_tokens=MAX_NEW, temperature=0.9, seed=1234, ignore_eos=True),
            SamplingParams(max_tokens=MAX_NEW, temperature=0.7, top_p=0.9, seed=99, ignore_eos=True)]


def other_requests(n: int, adapters: list[str | None], seed: int = 1):
    """n other requests of other lengths (3..150 tokens, some sharing PREFIX), temperatures and adapters."""
    rng = random.Random(seed)
    prompts, params, names = [], [], []
    for i in range(n):
        body = [rng.randrange(3, 300) for _ in range(rng.choice((3, 17, 40, 90, 150)))]
        prompts.append(PREFIX[:rng.choice((0, 16, 37))] + body)
        params.append(SamplingParams(max_tokens=rng.randrange(2, 14), temperature=rng.choice((0.0, 1.0)),
                                     seed=rng.choice((None, i)), ignore_eos=True))
        names.append(adapters[i % len(adapters)])
    return prompts, params, names


@dataclass
class Outcome:
    tokens: list[int]
    logits: torch.Tensor          # [new tokens, vocab] fp32: the rows the sampler saw

    def same(self, other: "Outcome") -> bool:
        return self.tokens == other.tokens and torch.equal(self.logits, other.logits)


@dataclass
class LogitRecorder:
    """Sits in front of the engine's sampler and keeps the row each position of each request was sampled from.
    With speculation a position can be scored twice (a guessed row after a refused guess, on the wrong text,
    then again on the right one): the later row is the one its token came from."""
    inner: object
    rows: dict = field(default_factory=dict)   # request id -> {position: row}

    def __call__(self, logits: torch.Tensor, seqs) -> list[int]:
        for row, seq in zip(logits, seqs):
            self.rows.setdefault(seq.request_id, {})[seq.num_tokens] = row.detach().clone()
        return self.inner(logits, seqs)

    def pop(self, request_id: str, num_tokens: int) -> torch.Tensor:
        """The rows of the request's first num_tokens generated tokens (a guessed row past the reply's end is
        never sampled from again)."""
        by_position = self.rows.pop(request_id)
        return torch.stack([by_position[p] for p in sorted(by_position)][:num_tokens])


def make_llm(folder, dtype: str, threads: int = 2, **config) -> tuple[LLM, LogitRecorder]:
    llm = LLM(folder, dtype=dtype, num_threads=threads, **{"kv_cache_gb": 0.05, **config})
    recorder = LogitRecorder(llm.engine.sampler)
    llm.engine.sampler = recorder
    return llm, recorder


def run(llm: LLM, recorder: LogitRecorder, prompts, params, adapters=None) -> list[Outcome]:
    outs = llm.generate(prompts, params, adapter=adapters)
    return [Outcome(o.token_ids, recorder.pop(o.request_id, len(o.token_ids))) for o in outs]


def kv_gb_for_blocks(folder, num_blocks: int, itemsize: int, block_size: int = 16) -> float:
    """kv_cache_gb that buys exactly num_blocks KV blocks of this model folder's shape."""
    c = json.loads((Path(folder) / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    block_bytes = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * block_size * head_dim * itemsize
    return num_blocks * block_bytes / 2**30


def first_difference(got: list[Outcome], want: list[Outcome]) -> str | None:
    """None when every outcome is the same, else a line saying which request and step differ first."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g.same(w):
            continue
        for step, (a, b) in enumerate(zip(g.logits, w.logits)):
            if not torch.equal(a, b):
                return (f"request {i}: logits differ at step {step} (max |diff| {(a - b).abs().max().item():.3g}); "
                        f"tokens {g.tokens} vs {w.tokens}")
        return f"request {i}: tokens {g.tokens} vs {w.tokens}"
    return None


def with_adapters(llm, paths) -> list[str | None]:
    """Load the adapters as "a", "b"; their names ([None] without adapters)."""
    for name, path in zip("ab", paths or []):
        llm.load_adapter(name, path)
    return ["a", "b"][:len(paths or [])] or [None]


def check_matrix(folder, dtype: str, adapter_paths, name: str) -> None:
    """Issue 16's matrix: the same requests (a) alone and cold, (b) after a request sharing their prefix,
    (c) under token budgets 16, 64 and 512 with the step-time cap on, (d) batched with 15 others of other
    lengths, temperatures and adapters, (e) under a KV budget that forces preemption, (f) on 1 thread:
    identical token ids and bit-identical logits. adapter_paths: two LoRA adapter folders, or None."""
    prompts, params = target_prompts(), target_params()
    adapters = [None, "a", None] if adapter_paths else [None] * 3   # the middle one: an adapter of its own

    # (a) each alone, cold (no prefix cache): the reference
    llm, rec = make_llm(folder, dtype, enable_prefix_caching=False)
    with_adapters(llm, adapter_paths)
    want = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(prompts, params, adapters)]
    assert len({tuple(w.tokens) for w in want}) > 1

    def check(label, got):
        problem = first_difference(got, want)
        assert problem is None, f"{name}, {label}: {problem}"

    # (b) after a request sharing the prefix: their first blocks come from the prefix cache
    llm, rec = make_llm(folder, dtype)
    with_adapters(llm, adapter_paths)
    run(llm, rec, [PREFIX + [5, 6, 7]], [params[0]])
    got = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(prompts, params, adapters)]
    check("prefix cache hit", got)
    assert llm.metrics().prefix_cache_hit_rate > 0

    # (c) token budgets 16, 64, 512 with the step-time cap on (a tiny target: chunks follow measured times)
    for budget, target_s in ((16, 0.15), (64, 0.15), (512, 0.0005)):
        llm, rec = make_llm(folder, dtype, max_num_batched_tokens=budget, step_target_s=target_s)
        with_adapters(llm, adapter_paths)
        check(f"budget {budget}", run(llm, rec, prompts, params, adapters))

    # (d) batched with 15 others of other lengths, temperatures and adapters
    llm, rec = make_llm(folder, dtype)
    names = with_adapters(llm, adapter_paths)
    o_prompts, o_params, o_adapters = other_requests(15, [None] + names)
    got = run(llm, rec, o_prompts[:7] + prompts + o_prompts[7:], o_params[:7] + params + o_params[7:],
              o_adapters[:7] + adapters + o_adapters[7:])
    check("batched with 15 others", got[7:10])

    # (e) a KV budget that forces preemption (and recompute) while they run with others
    itemsize = 4 if dtype == "float32" else 2
    llm, rec = make_llm(folder, dtype, kv_cache_gb=kv_gb_for_blocks(folder, 14, itemsize=itemsize))
    with_adapters(llm, adapter_paths)
    got = run(llm, rec, prompts + o_prompts[:4], params + o_params[:4], adapters + o_adapters[:4])
    check("preempted", got[:3])
    assert llm.metrics().num_preemptions > 0

    # (f) one thread
    llm, rec = make_llm(folder, dtype, threads=1)
    with_adapters(llm, adapter_paths)
    check("1 thread", run(llm, rec, prompts, params, adapters))

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
    """Sits in front of the engine's sampler and keeps every row it is handed, per request."""
    inner: object
    rows: dict = field(default_factory=dict)

    def __call__(self, logits: torch.Tensor, seqs) -> list[int]:
        for row, seq in zip(logits, seqs):
            self.rows.setdefault(seq.request_id, []).append(row.detach().clone())
        return self.inner(logits, seqs)


def make_llm(folder, dtype: str, threads: int = 2, **config) -> tuple[LLM, LogitRecorder]:
    llm = LLM(folder, dtype=dtype, num_threads=threads, **{"kv_cache_gb": 0.05, **config})
    recorder = LogitRecorder(llm.engine.sampler)
    llm.engine.sampler = recorder
    return llm, recorder


def run(llm: LLM, recorder: LogitRecorder, prompts, params, adapters=None) -> list[Outcome]:
    outs = llm.generate(prompts, params, adapter=adapters)
    return [Outcome(o.token_ids, torch.stack(recorder.rows.pop(o.request_id))) for o in outs]


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

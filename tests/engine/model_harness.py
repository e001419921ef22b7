"""Test helpers for the model runner: minimal sequences, a scattered block allocator, greedy loops, and
the transformers reference. Test-only stand-ins with the fields ModelRunner reads from Sequence /
ScheduledChunk, so these tests depend on the model side only."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM

from llmchat.engine.config import EngineConfig
from llmchat.engine.model_runner import ModelRunner
from llmchat.engine.sequence import ScheduledChunk


@dataclass
class Seq:
    seq_id: int
    token_ids: list[int]
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    adapter_slot: int = -1


class Blocks:
    """Hands out KV blocks in a shuffled order so block tables are never contiguous."""

    def __init__(self, runner: ModelRunner, num_blocks: int = 64, seed: int = 0) -> None:
        runner.allocate_kv_cache(num_blocks)
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)
        self.block_size = runner.block_size

    def reserve(self, seq: Seq, upto: int) -> None:
        while len(seq.block_table) * self.block_size < upto:
            seq.block_table.append(self.free.pop())


def make_runner(folder, backend: str = "torch", dtype: str = "float32", **kw) -> ModelRunner:
    runner = ModelRunner(EngineConfig(folder, dtype=dtype, attention_backend=backend, **kw))
    # a missing kernels build must fail the kernels tests, not quietly test the torch path twice
    assert runner.attention_backend == backend, f"llmchat.kernels unavailable: ran {runner.attention_backend}"
    return runner


def step(runner: ModelRunner, blocks: Blocks, work: list[tuple[Seq, int]]) -> torch.Tensor:
    """One execute() over (sequence, new tokens) pairs; advances num_computed_tokens."""
    for seq, n in work:
        blocks.reserve(seq, seq.num_computed_tokens + n)
    logits = runner.execute([ScheduledChunk(seq, n) for seq, n in work])
    for seq, n in work:
        seq.num_computed_tokens += n
    return logits


def greedy(runner: ModelRunner, blocks: Blocks, prompts: list[list[int]], max_new: int,
           chunk: int | None = None) -> tuple[list[list[int]], list[list[torch.Tensor]]]:
    """Greedy-decode all prompts together (prefills chunked by `chunk`, mixed with decodes).
    Returns the new tokens and the logits row behind each of them, per prompt."""
    seqs = [Seq(i, list(p)) for i, p in enumerate(prompts)]
    outs: list[list[int]] = [[] for _ in prompts]
    rows: list[list[torch.Tensor]] = [[] for _ in prompts]
    while any(len(o) < max_new for o in outs):
        work = []
        for seq, out in zip(seqs, outs):
            if len(out) < max_new:
                todo = len(seq.token_ids) - seq.num_computed_tokens
                work.append((seq, min(todo, chunk) if chunk else todo))
        logits = step(runner, blocks, work)
        for (seq, n), row in zip(work, logits):
            if seq.num_computed_tokens == len(seq.token_ids):  # chunk reached the end: sample
                token = int(row.argmax())
                outs[seq.seq_id].append(token)
                rows[seq.seq_id].append(row)
                seq.token_ids.append(token)
    return outs, rows


def hf_model(folder, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


@torch.inference_mode()
def hf_last_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0, -1].float()


@torch.inference_mode()
def hf_greedy(model, ids: list[int], max_new: int) -> tuple[list[int], list[torch.Tensor]]:
    """transformers' generate, greedy, EOS ignored so every run has exactly max_new tokens."""
    model.generation_config.eos_token_id = None  # this test-local model instance never stops early
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=max_new, output_logits=True,
                         return_dict_in_generate=True)
    assert out.sequences.shape[1] == len(ids) + max_new
    return out.sequences[0, len(ids):].tolist(), [row[0].float() for row in out.logits]


def prompt(n: int, seed: int, vocab: int = 300) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()

"""A draft model: a smaller model with the target's tokenizer (Qwen2.5-0.5B drafting for a 7B) that guesses a
decoding sequence's next tokens, greedily, where its own text offers no n-gram to look up (speculation.py).

It runs in the same engine, on the same thread, with a ModelRunner and a paged KV cache of its own under a
BlockManager of its own, prefix cache included: each target sequence has a shadow Sequence here holding the
tokens the draft has seen. A step's guessing is one pass over every shadow's unseen tokens (the prompt on the
first guess, afterwards the tokens verification kept), then one decode pass per further guess, all shadows
batched. A shadow's guesses that the target refused are rolled back (their KV stays behind the shadow's end
and is overwritten); only tokens the target has confirmed are hashed into the draft's prefix cache, so a
cached block never holds a refused guess.

The guesses are deterministic, so verification is the one of draft-free guessing (a guess holds when the
target's own sample at that position equals it): greedy and seeded replies keep their tokens, and a sampled
reply keeps the target's distribution.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from .block_manager import BlockManager
from .chat import load_tokenizer
from .config import EngineConfig
from .kv_budget import plan_kv_blocks
from .model_runner import ModelRunner
from .sampling_params import SamplingParams
from .sequence import ScheduledChunk, Sequence, SequenceStatus


class DraftModel:
    def __init__(self, target: EngineConfig, target_tokenizer, target_block_bytes: int, target_vocab: int,
                 target_weight_bytes: int) -> None:
        path = Path(target.draft_model)
        config = replace(target, model_path=path, draft_model=None, speculative="off", kv_disk=False)
        self.runner = ModelRunner(config)
        if self.runner.window_layers:
            raise ValueError(f"draft model {path.name}: models with sliding-window layers cannot draft")
        check_same_tokenizer(load_tokenizer(path), target_tokenizer, path.name)
        check_not_larger(self.runner.model.weight_bytes(), target_weight_bytes, path.name)
        self.vocab = min(self.runner.vocab_size, target_vocab)   # padded embedding rows are never guessed
        self.block_size = config.block_size
        # room for as many tokens as the target's cache holds: the draft never limits how many sequences guess
        gb = target.draft_kv_cache_gb
        if gb is None and target.kv_cache_gb is not None:
            gb = target.kv_cache_gb * self.runner.kv_block_bytes() / target_block_bytes
        num_blocks, self.kv_cache_gb = plan_kv_blocks(gb, self.runner.kv_block_bytes(), config.block_size,
                                                      config.max_num_seqs, self.runner.max_model_len)
        self.runner.allocate_kv_cache(num_blocks)
        self.blocks = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching,
                                   config.kv_blocks_per_group)
        self.max_batched_tokens = config.max_num_batched_tokens
        self.shadows: dict[int, Sequence] = {}   # target seq_id -> what the draft has seen of it

    # ---- guessing --------------------------------------------------------------------------------------
    def propose(self, wanted: list[tuple[Sequence, int]]) -> dict[int, list[int]]:
        """Up to k greedy guesses for each (target sequence, k); a sequence whose shadow does not fit the
        draft's cache gets none. Returns target seq_id -> guesses."""
        asked = {seq.seq_id for seq, k in wanted if k > 0}
        live: list[tuple[int, Sequence, int]] = []
        for seq, k in wanted:
            k = min(k, self.runner.max_model_len - seq.num_tokens)   # the draft's context may be the shorter
            if k > 0:
                shadow = self._sync(seq)
                if self._make_room(shadow, k, asked):
                    live.append((seq.seq_id, shadow, k))
        guesses = {target: [] for target, _, _ in live}
        # the first guess: every shadow's unseen tokens, in passes within the step's token budget
        pending = [(target, shadow) for target, shadow, _ in live]
        while pending:
            chunks, owners, budget = [], [], self.max_batched_tokens
            for target, shadow in pending:
                if budget <= 0:
                    break
                n = min(shadow.num_uncomputed_tokens, budget)
                chunks.append(ScheduledChunk(shadow, n, samples=n == shadow.num_uncomputed_tokens))
                owners.append(target)
                budget -= n
            tokens = self._greedy(chunks)   # one row per chunk
            for chunk, target, token in zip(chunks, owners, tokens):
                chunk.seq.num_computed_tokens += chunk.num_new_tokens
                self.blocks.on_computed(chunk.seq)   # the target's own tokens: hashed into the prefix cache
                if chunk.samples:
                    guesses[target].append(token)
                    chunk.seq.token_ids.append(token)
            pending = [(t, s) for t, s in pending if not guesses[t]]
        # each further guess: one decode pass over the shadows that want more
        for j in range(1, max((k for _, _, k in live), default=0)):
            going = [(target, shadow) for target, shadow, k in live if k > j]
            tokens = self._greedy([ScheduledChunk(shadow, 1, samples=True) for _, shadow in going])
            for (target, shadow), token in zip(going, tokens):
                shadow.num_computed_tokens += 1   # a guess: never hashed (the target may refuse it)
                guesses[target].append(token)
                shadow.token_ids.append(token)
        return guesses

    def _greedy(self, chunks: list[ScheduledChunk]) -> list[int]:
        logits = self.runner.execute(chunks)
        return logits[:, :self.vocab].argmax(dim=-1).tolist()

    def release(self, seq: Sequence) -> None:
        """The target sequence is done: its shadow's blocks go back (cached ones stay for reuse)."""
        shadow = self.shadows.pop(seq.seq_id, None)
        if shadow is not None:
            self.blocks.free(shadow)

    # ---- shadows -----------------------------------------------------------------------------------------
    def _sync(self, seq: Sequence) -> Sequence:
        """The shadow of seq, its tokens now seq's: what the draft computed past their common prefix (refused
        guesses) lies behind its end; a new shadow starts from the draft's prefix cache."""
        shadow = self.shadows.get(seq.seq_id)
        if shadow is None:
            shadow = Sequence(seq.token_ids, SamplingParams(max_tokens=None))
            shadow.status = SequenceStatus.RUNNING
            self.blocks.match_prefix(shadow)
            self.shadows[seq.seq_id] = shadow
            return shadow
        # at least the last token is computed again: its logits give the first guess (a sequence that did not
        # move since the last guess has nothing else unseen)
        common = min(_common_prefix(shadow.token_ids, seq.token_ids, shadow.num_computed_tokens), seq.num_tokens - 1)
        shadow.token_ids = list(seq.token_ids)
        shadow.num_computed_tokens = common
        del shadow.block_hashes[common // self.block_size:]
        return shadow

    def _make_room(self, shadow: Sequence, k: int, asked: set[int]) -> bool:
        """Blocks for the shadow's unseen tokens and k guesses, letting go of the shadows of sequences that
        do not guess this step (oldest first) if the draft's cache is full; False if even that is not enough."""
        need = shadow.num_uncomputed_tokens + k
        while not self.blocks.can_allocate(shadow, need):
            idle = next((target for target in self.shadows if target not in asked), None)
            if idle is None:
                return False
            self.blocks.free(self.shadows.pop(idle))
        self.blocks.allocate(shadow, need)
        return True


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(limit, len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def check_same_tokenizer(draft, target, name: str) -> None:
    """The draft's token ids must mean the target's tokens; ValueError otherwise."""
    if draft.get_vocab() != target.get_vocab():
        raise ValueError(f"draft model {name} has another tokenizer than the model it drafts for: its guesses "
                         "would be other tokens (pick a smaller model of the same family)")


def check_not_larger(draft_bytes: int, target_bytes: int, name: str) -> None:
    """A draft reads its weights once per guess: one larger than its target costs more than the decoding it is
    to save; ValueError."""
    if draft_bytes > target_bytes:
        raise ValueError(f"draft model {name} is larger than the model it drafts for ({draft_bytes / 2**20:.0f} MB "
                         f"of weights against {target_bytes / 2**20:.0f} MB): a draft must be the smaller model")

"""One request as the engine sees it: its tokens, how far its KV cache reaches, and its blocks."""
from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from enum import Enum

from .outputs import RequestMetrics
from .sampling_params import SamplingParams

_seq_ids = itertools.count()


class SequenceStatus(Enum):
    WAITING = "waiting"      # not admitted yet, or preempted (its KV is gone; recompute on readmission)
    RUNNING = "running"      # holds blocks; prefilling in chunks or decoding
    FINISHED = "finished"


class Sequence:
    """Prompt + generated tokens of one request, plus its place in the paged KV cache.

    Invariant: the KV of token_ids[:num_computed_tokens] is in the blocks of block_table.
    The newest sampled token is never computed yet, so a decoding sequence has exactly one
    uncomputed token; a prefilling one has more.
    """

    def __init__(self, token_ids: list[int], params: SamplingParams, *, request_id: str | None = None,
                 adapter: str | None = None, adapter_slot: int = -1, eos_token_ids: frozenset[int] = frozenset(),
                 max_total_tokens: int | None = None, metrics: RequestMetrics | None = None):
        self.seq_id: int = next(_seq_ids)
        self.request_id: str = request_id if request_id is not None else str(self.seq_id)
        self.token_ids: list[int] = list(token_ids)
        self.num_prompt_tokens: int = len(token_ids)
        self.num_computed_tokens: int = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []   # chained hash of each full, computed block (prefix cache keys)
        # Sliding-window layers' blocks (hybrid_blocks.py), by the same block index as block_table; entries before
        # window_start are out of every future token's window, let go, and hold 0 (never read).
        self.window_table: list[int] = []
        self.window_start: int = 0
        # The KV disk tier (kv_disk_link.py): the full blocks' stable digests, computed as needed, how many
        # blocks were handed to the writer, and prompt tokens restored from disk.
        self.disk_digests: list[bytes] = []
        self.disk_saved: int = 0
        self.disk_restored_tokens: int = 0
        self.params: SamplingParams = params
        self.adapter: str | None = adapter
        self.adapter_slot: int = adapter_slot
        self.adapter_key: str = adapter or ""   # part of every block hash: base and adapters never share KV
        self.status: SequenceStatus = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_token_ids: frozenset[int] = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else eos_token_ids)
        # Length cap from max_tokens and the context size, whichever comes first (neither: no cap here; the
        # scheduler still finishes a sequence that outgrows the whole KV cache).
        asked = None if params.max_tokens is None else self.num_prompt_tokens + params.max_tokens
        limits = [n for n in (asked, max_total_tokens) if n]
        self.max_total_tokens: int = min(limits) if limits else sys.maxsize
        self.metrics: RequestMetrics = metrics or RequestMetrics()
        self.metrics.num_prompt_tokens = self.num_prompt_tokens
        self.generator = None        # torch.Generator for seeded sampling (set by the engine)
        self.detokenizer = None      # IncrementalDetokenizer (set by the engine)
        self.matcher = None          # llguidance matcher of a constrained reply (engine/grammar.py)
        self.guesser = None          # speculation.Guesser while the engine may guess this sequence's tokens
        self.draft: list[int] = []   # this step's guesses of the tokens after the newest one
        self.text: str = ""          # output text shown so far

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[:self.num_prompt_tokens]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        """True once everything but the newest token is in the cache (one token to compute)."""
        return self.num_uncomputed_tokens == 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def __repr__(self) -> str:
        return (f"Sequence(id={self.seq_id}, tokens={self.num_tokens}, computed={self.num_computed_tokens}, "
                f"blocks={len(self.block_table)}, status={self.status.value})")


@dataclass
class ScheduledChunk:
    """Compute seq.token_ids[num_computed_tokens : num_computed_tokens + num_new_tokens] this step; a decode
    with guesses computes its newest token and then the guessed ones (num_new_tokens counts both)."""
    seq: Sequence
    num_new_tokens: int
    # True when the chunk reaches the last token: its logits row yields the next token.
    samples: bool = field(default=False)
    draft: list[int] = field(default_factory=list)   # guessed tokens after the newest one, scored this step
    num_accepted: int = 0                            # guesses the model agreed with (set after sampling)

    @property
    def input_ids(self) -> list[int]:
        start = self.seq.num_computed_tokens
        return self.seq.token_ids[start:start + self.num_new_tokens - len(self.draft)] + self.draft

    @property
    def num_logits(self) -> int:
        """Logits rows this chunk needs: the last token's, and every guessed position's."""
        return (1 + len(self.draft)) if self.samples else 0

"""Constrained decoding with llguidance: one matcher per constrained request, and the batch's token masks.

Where cores are left over beside the forward pass, the masks of a step are computed on a worker thread while
the model runs (llguidance releases the GIL); where the pass takes every core they are computed just before
it. Then they are applied to the sampled rows' logits in one vectorized step. A row's mask depends on
its own tokens only, so a constrained reply is the same whatever else shares the batch.
"""
from __future__ import annotations

import copy
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import numpy as np
import torch

from .sequence import Sequence
from .structured_outputs import StructuredOutputs

class GrammarCompiler:
    """The tokenizer as llguidance reads it (built on first use: ~1 s on a large vocabulary), and matchers.
    Any thread may call matcher(): the async front compiles off the engine thread."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids) -> None:
        self._hf_tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._eos = sorted(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                # the Rust tokenizer itself (transformers' fast tokenizers and our snapshot both carry one),
                # copied so that padding and truncation settings never reach llguidance
                backend = copy.copy(self._hf_tokenizer.backend_tokenizer)
                backend.no_padding()
                backend.no_truncation()
                n_vocab = max(self.vocab_size, backend.get_vocab_size(with_added_tokens=True))
                self._tokenizer = llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab,
                                                         eos_token=self._eos or None)
            return self._tokenizer

    def matcher(self, constraint: StructuredOutputs) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the reply; ValueError naming the parameter if the library refuses
        the constraint (its own message quoted)."""
        grammar = constraint.grammar_text()
        tokenizer = self.tokenizer
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
        if failed:
            raise ValueError(f"{constraint.parameter}: {messages[0].strip()}")
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"{constraint.parameter}: {matcher.get_error().strip()}")
        return matcher


class MaskBatch:
    """The token masks of one step's constrained rows, being filled on the worker thread."""

    def __init__(self, rows: list[int], bitmask: torch.Tensor, done: Future) -> None:
        self.rows = rows            # indices into the step's sampled sequences
        self.bitmask = bitmask      # int32 [len(rows), ceil(vocab / 32)], one bit per token
        self.done = done

    def apply(self, logits: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        """logits [S, V] of the sampled rows -> every token a row's grammar refuses at -inf: in a copy, or in
        `logits` itself when in_place (where the layout allows).

        Done in numpy, word by word: a word of 32 refused tokens (most of them, where the grammar expects
        punctuation) is one slice store, a word of 32 allowed ones (inside a string) is left alone, and only
        the rest are unpacked bit by bit. Small torch ops would each wake the thread pool: 16 rows of a
        152k vocabulary took 20 ms that way under load, 3 ms here."""
        self.done.result()
        count, vocab = logits.shape
        words = self.bitmask.numpy()
        width = words.shape[1] * 32
        shared = in_place and vocab == width and logits.dtype == torch.float32 and logits.is_contiguous()
        if shared:
            out = logits.numpy()   # the step's own logits, needed for nothing else (no logprobs asked)
        else:
            out = np.empty((count, width), dtype=np.float32)
            out[:, :vocab] = logits.float().numpy()
        blocks = out.reshape(count, words.shape[1], 32)
        rows = np.asarray(self.rows)
        r, c = np.nonzero(words == 0)
        blocks[rows[r], c] = -np.inf
        r, c = np.nonzero((words != 0) & (words != -1))
        if len(r):
            # little-endian words: byte k, bit j is token 8k + j of the word (x86-64 and aarch64 alike)
            refused = ~np.unpackbits(words[r, c].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little").view(bool)
            partial = blocks[rows[r], c]
            partial[refused] = -np.inf
            blocks[rows[r], c] = partial
        return logits if shared else torch.from_numpy(out)[:, :vocab]


class GrammarMasks:
    """Starts each step's mask computation and keeps the worker pool the masks are filled on."""

    def __init__(self, compiler: GrammarCompiler) -> None:
        self._compiler = compiler
        self._executor: llguidance.LLExecutor | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start(self, seqs: list[Sequence]) -> MaskBatch | None:
        """Begin the masks of the constrained rows among `seqs` (the step's sampled rows, in order: a sequence,
        or speculation's RowView of it `ahead` guesses on; a sequence's views are consecutive)."""
        rows = [i for i, s in enumerate(seqs) if s.matcher is not None]
        if not rows:
            return None
        width = -(-self._compiler.tokenizer.vocab_size // 32)
        bitmask = torch.zeros(len(rows), width, dtype=torch.int32)
        # one entry per constrained sequence: its matcher, its first row and its guesses, whose rows follow
        matchers = [(seqs[i].matcher, k, _guesses(seqs[i])) for k, i in enumerate(rows)
                    if getattr(seqs[i], "ahead", 0) == 0]
        spare = (os.cpu_count() or 1) - torch.get_num_threads()
        if spare < 1:
            # every core runs the forward pass: any thread beside it (ours, or the library's worker pool, which
            # spins a while after each job) stalls the pass's parallel regions at their barriers, while the
            # masks take ~2 ms for 16 rows of a 152k vocabulary; so they are filled first, on this thread
            row_bytes = width * 4
            for matcher, k, guesses in matchers:
                # a guessed row's mask is the matcher's after the guesses before it (validated when proposed)
                for j in range(len(guesses) + 1):
                    matcher.unsafe_compute_mask_ptr(bitmask.data_ptr() + (k + j) * row_bytes, row_bytes)
                    if j < len(guesses):
                        matcher.consume_token(guesses[j])
                if guesses:
                    matcher.rollback(len(guesses))
            done: Future = Future()
            done.set_result(None)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmchat-grammar")
            done = self._pool.submit(self._fill, matchers, bitmask.data_ptr(), width * 4, len(rows))
        return MaskBatch(rows, bitmask, done)

    def _fill(self, matchers: list, pointer: int, row_bytes: int, count: int) -> None:
        """On the worker: the library's parallel fill, its draft-token form for sequences with guesses (it
        advances each matcher through them and rolls back; it refuses an empty list)."""
        executor = self._executor_for_step()
        plain = [(m, k) for m, k, guesses in matchers if not guesses]
        guessing = [entry for entry in matchers if entry[2]]
        if plain:
            executor.unsafe_compute_mask_ptr(plain, pointer, row_bytes, count)
        if guessing:
            executor.unsafe_compute_mask_ptr_with_draft_token(guessing, pointer, row_bytes, count)

    def _executor_for_step(self) -> llguidance.LLExecutor:
        if self._executor is None:
            spare = (os.cpu_count() or 1) - torch.get_num_threads()
            self._executor = llguidance.LLExecutor(num_threads=max(1, min(4, spare)))
        return self._executor

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _guesses(row) -> list[int]:
    """The guesses whose rows follow this one's (speculation.RowView at ahead 0; a sequence's own row has none)."""
    return list(getattr(row, "row_guesses", None) or [])


def guessable(matcher, draft: list[int]) -> list[int]:
    """The guesses a constrained sequence may verify: those its grammar allows, in order, from its state, up to
    the one that completes the grammar (the reply ends there). A guess past that point, the end-of-text token the
    prompt's n-grams often offer, would be consumed by the stopped matcher without entering its history, so the
    rollback after the masks (GrammarMasks.start) would undo one real token too many and leave the matcher a token
    behind its sequence: later masks then allowed text the grammar refuses (a tool call closed as "</</tool_call>")."""
    if not draft:
        return draft
    allowed = draft[:matcher.validate_tokens(draft)]
    kept = 0
    for token in allowed:
        if matcher.is_stopped():
            break
        matcher.consume_token(token)
        kept += 1
    if kept:
        matcher.rollback(kept)
    return allowed[:kept]


def advance(seq: Sequence, token: int) -> bool:
    """Feed the sampled token to the sequence's matcher; True when the grammar is complete (only the end of
    the reply may follow), so the reply ends there."""
    matcher = seq.matcher
    if matcher is None:
        return False
    if not matcher.consume_token(token):
        # cannot happen for a masked draw; a refused token ends constrained generation rather than the engine
        seq.matcher = None
        return True
    return matcher.is_stopped()

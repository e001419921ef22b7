"""Iteration-level continuous batching: which tokens of which sequences run in the next step.

Each step gets a budget of max_num_batched_tokens. Decoding sequences go first (one token each, so
streams never stall), then prefills take what is left in chunks: partially prefilled sequences first,
then waiting ones in arrival order while fewer than max_num_seqs run. While some sequence is decoding,
the prefill tokens of a step are also capped so the step takes about step_target_s (from the measured cost
per token): the token budget alone would let a long prompt pause every other stream for a whole chunk
(0.4 s for a 512-token chunk of a 135M model here, seconds for a few-billion one).
When blocks run out, the newest running sequence is preempted: its blocks are freed and it is recomputed
later (its prefix may still be cached). A sequence that cannot fit in the whole cache on its own is
finished with "length".
"""
from __future__ import annotations

from collections import deque

from .block_manager import BlockManager
from .sequence import ScheduledChunk, Sequence, SequenceStatus


MIN_PREFILL_CHUNK = 32     # tokens: smaller chunks waste the kernels' efficiency for little smoothness
MIN_TIMED_TOKENS = 32      # steps with fewer tokens say little about the cost per token (fixed costs dominate)
COST_SMOOTHING = 0.3       # weight of the newest step in the running estimate of seconds per token


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 step_target_s: float = 0.0):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.step_target_s = step_target_s     # 0: no time cap, the token budget only
        self.seconds_per_token: float | None = None   # measured, see observe_step
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []      # in admission order; the newest is preempted first
        self.num_preemptions = 0
        self.capacity_tokens = block_manager.num_blocks * block_manager.block_size
        self.on_finish = None                  # callback(seq) once per finished sequence (LoRA unpins its slot)
        self.extend_prefix = None              # callback(seq) after a RAM prefix match (the KV disk tier)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark seq finished and give its blocks back at once (also used for abort)."""
        first_finish = seq.status is not SequenceStatus.FINISHED
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = seq.finish_reason or reason
        if first_finish and self.on_finish is not None:
            self.on_finish(seq)

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        """The model ran num_tokens tokens in seconds: update the cost per token the time cap uses."""
        if num_tokens < MIN_TIMED_TOKENS or seconds <= 0:
            return
        sample = seconds / num_tokens
        old = self.seconds_per_token
        self.seconds_per_token = sample if old is None else old + COST_SMOOTHING * (sample - old)

    def prefill_cap(self, num_decodes: int) -> int:
        """Prefill tokens allowed in a step that also decodes num_decodes sequences."""
        if not num_decodes or self.step_target_s <= 0 or self.seconds_per_token is None:
            return self.max_num_batched_tokens
        fit = int(self.step_target_s / self.seconds_per_token) - num_decodes
        return max(MIN_PREFILL_CHUNK, fit)

    def schedule(self) -> tuple[list[ScheduledChunk], list[Sequence]]:
        """Returns (chunks to run, sequences finished here because they outgrew the whole cache)."""
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        scheduled: set[int] = set()
        overflowed: list[Sequence] = []
        preempted_now = False

        decodes = [s for s in self.running if s.is_decoding]
        prefills = [s for s in self.running if not s.is_decoding]
        prefill_left = self.prefill_cap(len(decodes))
        spare = max(0, budget - len(decodes))   # guessed tokens ride only on what every decode leaves
        for seq in decodes + prefills:
            if budget == 0 or (not seq.is_decoding and prefill_left <= 0):
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue   # preempted by an earlier sequence in this loop
            if seq.num_tokens > self.capacity_tokens:
                self.finish(seq, "length")
                overflowed.append(seq)
                continue
            limit = budget if seq.is_decoding else min(budget, prefill_left)
            num_new = min(seq.num_uncomputed_tokens, limit)
            if not self._make_room(seq, num_new, scheduled):
                preempted_now = True
                continue   # seq itself was preempted
            preempted_now |= self._preempted_in_make_room
            draft = self._fitting_draft(seq, min(spare, budget - num_new)) if seq.is_decoding else []
            spare -= len(draft)
            self.block_manager.allocate(seq, num_new + len(draft))
            chunks.append(self._chunk(seq, num_new, draft))
            scheduled.add(seq.seq_id)
            budget -= num_new + len(draft)
            if not seq.is_decoding:
                prefill_left -= num_new

        # Admit waiting sequences only when nothing had to give way this step (avoids thrashing).
        while (self.waiting and min(budget, prefill_left) > 0 and not preempted_now
               and len(self.running) < self.max_num_seqs):
            seq = self.waiting[0]
            self.block_manager.match_prefix(seq)
            if self.extend_prefix is not None:
                self.extend_prefix(seq)
            remaining = seq.num_uncomputed_tokens
            num_new = min(remaining, budget, prefill_left)
            if not self.block_manager.can_admit(seq, remaining, num_new):
                self.block_manager.free(seq)   # hand the matched blocks back while it waits
                if not self.running:   # cannot happen for prompts accepted at submission; be safe
                    self.waiting.popleft()
                    self.finish(seq, "length")
                    overflowed.append(seq)
                    continue
                break
            self.block_manager.record_lookup(seq)
            if seq.metrics.num_preemptions == 0:
                seq.metrics.num_cached_tokens = min(seq.num_computed_tokens, seq.num_prompt_tokens)
                seq.metrics.num_disk_cached_tokens = min(seq.disk_restored_tokens, seq.metrics.num_cached_tokens)
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            self.block_manager.allocate(seq, num_new)
            chunks.append(self._chunk(seq, num_new))
            scheduled.add(seq.seq_id)
            budget -= num_new
            prefill_left -= num_new
        return chunks, overflowed

    def _chunk(self, seq: Sequence, num_new: int, draft: list[int] | None = None) -> ScheduledChunk:
        draft = draft or []
        return ScheduledChunk(seq, num_new + len(draft), samples=seq.num_computed_tokens + num_new == seq.num_tokens,
                              draft=draft)

    def _fitting_draft(self, seq: Sequence, room: int) -> list[int]:
        """The sequence's guesses that fit the step's spare tokens and the free blocks: a guess never makes
        another sequence give way."""
        draft = seq.draft[:max(0, room)]
        while draft and not self.block_manager.can_allocate(seq, 1 + len(draft)):
            draft = draft[:-1]
        return draft

    def _make_room(self, seq: Sequence, num_new: int, scheduled: set[int]) -> bool:
        """Preempt the newest unscheduled running sequences until seq's chunk fits; False if seq itself went."""
        self._preempted_in_make_room = False
        while not self.block_manager.can_allocate(seq, num_new):
            victim = next((s for s in reversed(self.running) if s.seq_id not in scheduled), None)
            if victim is None:   # everything else already runs this step; cannot happen with seq unscheduled
                victim = seq
            self._preempt(victim)
            self._preempted_in_make_room = True
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Free seq's KV and queue it first for recompute (prompt + output so far)."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.metrics.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def update(self, chunks: list[ScheduledChunk]) -> None:
        """After the model ran: the chunks' KV is written; newly full blocks are registered for reuse (and
        blocks the sliding-window layers no longer see are let go, see hybrid_blocks.py)."""
        for chunk in chunks:
            # guesses the model refused leave their KV behind the sequence's end, where nothing reads it and
            # the next tokens overwrite it; their blocks stay with the sequence
            chunk.seq.num_computed_tokens += chunk.num_new_tokens - len(chunk.draft) + chunk.num_accepted
            self.block_manager.on_computed(chunk.seq)

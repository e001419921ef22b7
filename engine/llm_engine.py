"""The engine loop, one step at a time: schedule -> run the model -> sample and stream the results."""
from __future__ import annotations

import copy
import ctypes
import time

import torch

from .block_manager import BlockManager
from .chat import load_tokenizer, prompt_to_token_ids
from .config import EngineConfig
from .detokenizer import IncrementalDetokenizer
from .grammar import GrammarCompiler, GrammarMasks, advance, guessable
from .hybrid_blocks import HybridBlockManager, WindowBlockManager, window_pool_blocks
from .kv_budget import plan_hybrid_kv_blocks, plan_kv_blocks
from .logprobs import token_logprobs, wanted
from .lora.manager import LoraManager
from .metrics import EngineMetrics, MetricsSnapshot
from .outputs import RequestMetrics, RequestOutput, StreamDelta
from .sampler import Sampler
from .sampling_params import SamplingParams
from .scheduler import Scheduler
from .sequence import ScheduledChunk, Sequence
from .speculation import AUTO_MAX_DECODES, Guesser, accepted_run, row_views, sampled_rows
from .step_costs import StepCosts


def _return_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise); a no-op elsewhere."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class LLMEngine:
    """Not thread-safe: one thread calls add_sequence/step/abort (AsyncEngine runs it in its own)."""

    def __init__(self, config: EngineConfig, load_progress=None):
        """load_progress: called as (bytes done, bytes in all) while the weights are read and prepared, from
        this thread (see model_loader.LoadProgress)."""
        from .model_runner import ModelRunner   # heavy: torch model + weights

        self.config = config
        if config.num_threads:   # explicit user choice (torch's thread pool is process-wide)
            torch.set_num_threads(config.num_threads)
        self.runner = ModelRunner(config, load_progress)
        self.tokenizer = load_tokenizer(config.model_path)
        self.max_model_len: int = self.runner.max_model_len
        self.vocab_size: int = self.runner.vocab_size
        self.eos_token_ids = frozenset(self.runner.eos_token_ids)
        self.generation_defaults: dict = dict(self.runner.generation_defaults)
        num_blocks = self._plan_kv_cache()
        _return_freed_memory()   # loading leaves freed fp32 staging buffers in the heap
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.step_target_s)
        self.sampler = Sampler()
        self.grammar = GrammarCompiler(self.tokenizer, self.vocab_size, self.eos_token_ids)
        self.grammar_masks = GrammarMasks(self.grammar)
        self.metrics = EngineMetrics(num_blocks, self.kv_cache_gb)
        self.lora = LoraManager(self.runner, config.max_adapters, int(config.adapter_memory_gb * 2**30),
                                config.lora_fused)
        self.draft = self._draft_model()
        self.scheduler.on_finish = self._on_finish
        self.disk_prefix = self._disk_tier()
        if self.disk_prefix is not None:
            self.scheduler.extend_prefix = self.disk_prefix.restore
        self.requests: dict[str, Sequence] = {}
        self.spec_counts = {"guessed": 0, "accepted": 0, "verifications": 0}   # since start (metrics)
        self.step_costs = StepCosts()   # decode steps' seconds by rows: where "auto" guessing pays here
        self._pending: list[StreamDelta] = []     # deltas produced outside step() (aborts)

    def _plan_kv_cache(self) -> int:
        """Size and allocate the KV cache and its block manager; returns the blocks of the full layers."""
        config, runner = self.config, self.runner
        window_layers = runner.window_layers
        if not window_layers:
            num_blocks, self.kv_cache_gb = plan_kv_blocks(
                config.kv_cache_gb, runner.kv_block_bytes(), config.block_size, config.max_num_seqs,
                self.max_model_len)
            runner.allocate_kv_cache(num_blocks)
            self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching,
                                              config.kv_blocks_per_group)
            return num_blocks
        sizes = (runner.kv_block_bytes(runner.args.num_layers - len(window_layers)),
                 runner.kv_block_bytes(len(window_layers)))
        need = window_pool_blocks(runner.kv_window, config.block_size, config.max_num_seqs,
                                  config.max_num_batched_tokens)
        num_blocks, window_blocks, self.kv_cache_gb = plan_hybrid_kv_blocks(
            config.kv_cache_gb, *sizes, need, config.block_size, config.max_num_seqs, self.max_model_len)
        runner.allocate_kv_cache(num_blocks, window_blocks)
        self.block_manager = HybridBlockManager(
            BlockManager(num_blocks, config.block_size, config.enable_prefix_caching, config.kv_blocks_per_group),
            WindowBlockManager(window_blocks, config.block_size, runner.kv_window, config.enable_prefix_caching,
                               config.kv_blocks_per_group),
            sizes)
        return num_blocks

    def _disk_tier(self):
        """The KV disk tier under the prefix cache (kv_disk.py), or None: switched off, no prefix cache, or a
        model with sliding-window layers (their pool keeps only the window)."""
        config = self.config
        if not (config.kv_disk and config.enable_prefix_caching) or self.runner.window_layers:
            return None
        from .kv_disk import KVDiskTier
        from .kv_disk_link import DiskPrefix, kv_identity
        tier = KVDiskTier(kv_identity(config, self.runner), config.block_size, config.kv_disk_gb)
        return DiskPrefix(tier, self.runner, self.block_manager) if tier.enabled else None

    def flush_kv_disk(self, timeout: float | None = None) -> bool:
        """Wait until every computed block queued for the disk tier is written (tests; before an exit)."""
        return self.disk_prefix is None or self.disk_prefix.tier.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """When the engine is done with (its thread stopped): the disk tier's queued blocks are written (up to
        `timeout`) and the grammar masks' worker thread ends, so an app that unloads models keeps no threads."""
        self.flush_kv_disk(timeout)
        self.grammar_masks.close()

    # ---- submission -----------------------------------------------------------------------------
    def make_sequence(self, prompt, params: SamplingParams | None = None, adapter: str | None = None,
                      request_id: str | None = None) -> Sequence:
        """Validate and tokenize a request; raises ValueError. Reads only immutable state, so any
        thread may call it (the async front does, to fail before the first delta)."""
        params = copy.deepcopy(params) if params is not None else SamplingParams()
        params.validate()
        params = params.with_defaults(self.generation_defaults)
        params.validate()
        if adapter is not None and not self.lora.is_registered(adapter):
            raise ValueError(f"adapter {adapter!r} is not loaded")
        token_ids = prompt_to_token_ids(self.tokenizer, prompt, self.vocab_size)
        n = len(token_ids)
        if n >= self.max_model_len:
            raise ValueError(f"the prompt has {n} tokens but the context holds {self.max_model_len} "
                             f"(prompt + at least one new token)")
        capacity = self.block_manager.num_blocks * self.config.block_size
        if n + 1 > capacity:
            raise ValueError(f"the prompt has {n} tokens but the KV cache holds only {capacity} tokens "
                             f"({self.kv_cache_gb:.2f} GiB); raise kv_cache_gb")
        seq = Sequence(token_ids, params, request_id=request_id, adapter=adapter,
                       eos_token_ids=self.eos_token_ids, max_total_tokens=self.max_model_len,
                       metrics=RequestMetrics(arrival_time=time.monotonic()))
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        if params.structured_outputs is not None:
            seq.matcher = self.grammar.matcher(params.structured_outputs)
        seq.detokenizer = IncrementalDetokenizer(self.tokenizer, token_ids, params.stop)
        return seq

    def add_sequence(self, seq: Sequence) -> None:
        if seq.request_id in self.requests:
            raise ValueError(f"request id {seq.request_id!r} is already in use")
        if seq.adapter is not None:   # pins the adapter version until the request finishes
            seq.adapter_slot, seq.adapter_key = self.lora.acquire(seq.adapter)
        self.requests[seq.request_id] = seq
        self.scheduler.add(seq)

    def add_request(self, prompt, params: SamplingParams | None = None, adapter: str | None = None,
                    request_id: str | None = None) -> Sequence:
        seq = self.make_sequence(prompt, params, adapter, request_id)
        self.add_sequence(seq)
        return seq

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks; its stream gets a final "abort" delta."""
        seq = self.requests.get(request_id)
        if seq is None or seq.is_finished:
            return False
        self.scheduler.finish(seq, "abort")
        self._pending.append(self._close(seq, ""))
        self._refresh_gauges()
        return True

    # ---- LoRA adapters (engine/lora): any thread; loading never waits for a step ------------------
    def load_adapter(self, name: str, path) -> None:
        """Load, or reload under the same name, a PEFT LoRA adapter (folder or model-store name)."""
        self.lora.load(name, path)
        self.metrics.update_state(adapters_resident=self.lora.resident_names())

    def unload_adapter(self, name: str) -> None:
        """Forget an adapter; requests already running with it finish with it."""
        self.lora.unload(name)
        self.metrics.update_state(adapters_resident=self.lora.resident_names())

    def _on_finish(self, seq: Sequence) -> None:
        if seq.adapter_slot >= 0:
            self.lora.release(seq.adapter_slot)
            seq.adapter_slot = -1
        if self.draft is not None:
            self.draft.release(seq)

    def _draft_model(self):
        """The draft model (draft_model.py) EngineConfig.draft_model names, or None."""
        if self.config.draft_model is None:
            return None
        from .draft_model import DraftModel
        return DraftModel(self.config, self.tokenizer, self.runner.kv_block_bytes(), self.vocab_size,
                          self.runner.model.weight_bytes())

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._pending)

    # ---- one iteration --------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[StreamDelta]:
        step_started = time.perf_counter()
        deltas, self._pending = self._pending, []
        self._propose_guesses()
        chunks, overflowed = self.scheduler.schedule()
        deltas += [self._close(seq, seq.detokenizer.flush()) for seq in overflowed]
        prompt_tokens = generated = 0
        if chunks:
            started = time.perf_counter()
            sampled = [c for c in chunks if c.samples]
            views = [view for c in sampled for view in row_views(c)]   # one per logits row that samples
            masks = self.grammar_masks.start(views)   # filled during the pass
            logits = self.runner.execute(chunks)
            self.scheduler.observe_step(sum(c.num_new_tokens for c in chunks), time.perf_counter() - started)
            prompt_tokens = sum(c.num_new_tokens for c in chunks if not c.draft and (
                c.seq.num_output_tokens == 0 or c.num_new_tokens > 1))
            emitted: list[tuple[ScheduledChunk, list[int], list]] = []
            if sampled:
                # every row samples in a decode step: no copy of the [S, vocab] logits then
                rows = sampled_rows(chunks)
                rows_logits = logits if len(rows) == logits.shape[0] else logits[rows]
                asked = wanted(views)   # logprobs come from the model's own logits, before any mask
                tokens = self.sampler(rows_logits if masks is None else masks.apply(rows_logits, in_place=not asked),
                                      views)
                logprobs = token_logprobs(rows_logits, tokens, views) if asked else [None] * len(views)
                emitted = self._verify(sampled, tokens, logprobs)
            if not prompt_tokens:   # a decode-only step (guesses included): what its rows cost here
                self.step_costs.record(sum(c.num_new_tokens for c in chunks), time.perf_counter() - started)
            self.scheduler.update(chunks)   # after verification: only accepted guesses count as computed
            if self.disk_prefix is not None:
                self.disk_prefix.save(chunks)
            for chunk, new_tokens, new_logprobs in emitted:
                for token, logprob in zip(new_tokens, new_logprobs):
                    deltas.append(self._append(chunk.seq, token, logprob))
                    generated += 1
                    if chunk.seq.is_finished:   # a stop among the accepted guesses: the rest is not the reply
                        break
        self.metrics.record_step(prompt_tokens, generated, busy_s=time.perf_counter() - step_started,
                                 **self._gauges())
        return deltas

    # ---- speculation (speculation.py) -----------------------------------------------------------
    def _propose_guesses(self) -> None:
        """Give each decoding sequence its guesses for this step (none where guessing is off or does not pay)."""
        running = self.scheduler.running
        for seq in running:
            seq.draft = []
        decoding = [s for s in running if s.is_decoding]
        auto: dict[Sequence, int] = {}               # "auto" sequences and how far each would guess
        for_draft: list[tuple[Sequence, int]] = []   # no n-gram to look up: the draft model guesses, if any
        for seq in decoding:
            mode = seq.params.speculative or self.config.speculative   # a request's own switch wins
            if mode == "off":
                continue
            if seq.guesser is None:
                seq.guesser = Guesser()
            seq.guesser.settle(seq.token_ids)
            k = seq.guesser.length(seq.max_total_tokens - seq.num_tokens - 1)
            seq.draft = seq.guesser.lookup(seq.token_ids, k)
            if not seq.draft and k and self.draft is not None:
                for_draft.append((seq, k))
            if mode == "auto" and k:
                auto[seq] = len(seq.draft) or (k if self.draft is not None else 0)
        if auto and not self._auto_guessing_pays(decoding, auto):
            for seq in auto:
                if seq.draft:
                    seq.guesser.defer(seq.num_tokens, seq.draft)
                seq.draft = []
            for_draft = [(seq, k) for seq, k in for_draft if seq not in auto]
        if for_draft:
            guesses = self.draft.propose(for_draft)
            for seq, _ in for_draft:
                seq.draft = guesses.get(seq.seq_id, [])
        for seq in decoding:
            if seq.matcher is not None and seq.draft:   # only guesses the grammar allows: others could never hold
                seq.draft = guessable(seq.matcher, seq.draft)

    def _auto_guessing_pays(self, decoding: list[Sequence], auto: dict[Sequence, int]) -> bool:
        """Whether the "auto" sequences' guesses (auto: how many each) bring more tokens than their rows cost, by
        this machine's measured step costs (step_costs.py) and each sequence's guesses held so far. Never in a
        crowd with prompts still to prefill. Until the costs are measured: while few sequences run or wait, and
        now and then past that too, to measure."""
        guesses = sum(auto.values())
        if not guesses:
            return True
        plain = len(decoding) + sum(len(s.draft) for s in decoding if s not in auto)
        expected = plain + sum(s.guesser.expected_accepted(k) for s, k in auto.items())
        waiting = self.scheduler.waiting
        crowded = len(self.scheduler.running) + len(waiting) > AUTO_MAX_DECODES
        if crowded and (waiting or len(decoding) < len(self.scheduler.running)):
            return False   # prompts share these steps: a compute-bound step, where a guessed row costs a token
        pays = self.step_costs.guessing_pays(plain, plain + guesses, expected)
        if pays is not None:
            return pays
        return not crowded or self.step_costs.try_unmeasured()

    def _verify(self, sampled: list[ScheduledChunk], tokens: list[int], logprobs: list) -> list:
        """Per sampling chunk: the tokens it emits (its guesses the model agreed with, then the model's own) and
        their logprobs; records how many guesses held."""
        out, at = [], 0
        for chunk in sampled:
            n = 1 + len(chunk.draft)
            new_tokens = accepted_run(chunk.draft, tokens[at:at + n]) if chunk.draft else [tokens[at]]
            if chunk.draft:
                chunk.num_accepted = len(new_tokens) - 1
                chunk.seq.guesser.observe(len(chunk.draft), chunk.num_accepted)
                chunk.seq.metrics.num_guessed_tokens += len(chunk.draft)
                chunk.seq.metrics.num_accepted_guesses += chunk.num_accepted
                self.spec_counts["guessed"] += len(chunk.draft)
                self.spec_counts["accepted"] += chunk.num_accepted
                self.spec_counts["verifications"] += 1
            out.append((chunk, new_tokens, logprobs[at:at + len(new_tokens)]))
            at += n
        return out

    def _append(self, seq: Sequence, token: int, logprob=None) -> StreamDelta:
        now = time.monotonic()
        seq.append_token(token)
        seq.metrics.num_generated_tokens += 1
        if seq.metrics.first_token_time is None:
            seq.metrics.first_token_time = now
        text = seq.detokenizer.add_token(token)
        reason = None
        grammar_done = advance(seq, token)
        if seq.detokenizer.stopped or token in seq.stop_token_ids or grammar_done:
            reason = "stop"
        elif seq.num_tokens >= seq.max_total_tokens:
            reason = "length"
        logprobs = None if logprob is None else [logprob]
        if reason is None:
            seq.text += text
            return StreamDelta(seq.request_id, text, [token], metrics=copy.copy(seq.metrics), logprobs=logprobs)
        self.scheduler.finish(seq, reason)
        closing = self._close(seq, text + seq.detokenizer.flush(), [token])
        closing.logprobs = logprobs
        return closing

    def _close(self, seq: Sequence, text: str, token_ids: list[int] | None = None) -> StreamDelta:
        """Final delta of a finished sequence; the request is forgotten (its output stays on seq)."""
        seq.text += text
        seq.metrics.finish_time = time.monotonic()
        self.requests.pop(seq.request_id, None)
        return StreamDelta(seq.request_id, text, token_ids or [], finished=True,
                           finish_reason=seq.finish_reason, metrics=copy.copy(seq.metrics))

    # ---- outputs and metrics --------------------------------------------------------------------
    @staticmethod
    def output_of(seq: Sequence) -> RequestOutput:
        return RequestOutput(seq.request_id, seq.prompt_token_ids, seq.output_token_ids, seq.text,
                             seq.finish_reason or "abort", copy.copy(seq.metrics), seq.adapter)

    def _gauges(self) -> dict:
        per_adapter: dict[str, int] = {}
        for s in self.scheduler.running:
            if s.adapter is not None:
                per_adapter[s.adapter] = per_adapter.get(s.adapter, 0) + 1
        return dict(kv_blocks_used=self.block_manager.num_used_blocks,
                    prefix_cache_hit_rate=self.block_manager.hit_rate,
                    num_running=len(self.scheduler.running), num_waiting=len(self.scheduler.waiting),
                    num_preemptions=self.scheduler.num_preemptions,
                    adapters_resident=self.lora.resident_names(), running_per_adapter=per_adapter,
                    spec_guessed_tokens=self.spec_counts["guessed"],
                    spec_accepted_tokens=self.spec_counts["accepted"],
                    spec_verifications=self.spec_counts["verifications"],
                    **self._disk_gauges())

    def _disk_gauges(self) -> dict:
        hits = self.disk_prefix.tier.hit_tokens if self.disk_prefix else 0
        looked_up = getattr(self.block_manager, "query_tokens", 0)
        return dict(prefix_disk_hit_tokens=hits, prefix_disk_hit_rate=hits / looked_up if looked_up else 0.0)

    def _refresh_gauges(self) -> None:
        self.metrics.update_state(**self._gauges())

    def metrics_snapshot(self) -> MetricsSnapshot:
        return self.metrics.snapshot()

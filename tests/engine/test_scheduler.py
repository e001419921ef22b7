"""Scheduler: token budget, decodes before prefill chunks, the step time cap, max_num_seqs, preemption, abort."""
from __future__ import annotations

from llmchat.engine.block_manager import BlockManager
from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.scheduler import MIN_PREFILL_CHUNK, MIN_TIMED_TOKENS, Scheduler
from llmchat.engine.sequence import Sequence, SequenceStatus

BS = 8


def make(num_blocks=64, max_num_seqs=8, budget=32, caching=True) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, BS, caching), max_num_seqs, budget)


def seq_of(n_prompt: int, max_tokens: int = 4, start: int = 0) -> Sequence:
    return Sequence(list(range(start, start + n_prompt)), SamplingParams(max_tokens=max_tokens))


def step(s: Scheduler):
    """One engine step without a model: every sampling chunk gets token 7; finished at max_tokens."""
    chunks, overflowed = s.schedule()
    s.update(chunks)
    for c in chunks:
        if c.samples:
            c.seq.append_token(7)
            if c.seq.num_tokens >= c.seq.max_total_tokens:
                s.finish(c.seq, "length")
    return chunks, overflowed


def check_invariants(s: Scheduler) -> None:
    bm = s.block_manager
    held = sum(len(q.block_table) for q in s.running)
    shared = sum(b.ref_count for b in bm.blocks)
    assert held == shared, "ref counts equal the block-table entries of running sequences"
    assert bm.num_used_blocks == sum(1 for b in bm.blocks if b.ref_count > 0)
    for q in s.running:
        assert len(q.block_table) * BS >= q.num_computed_tokens
    for q in s.waiting:
        assert q.block_table == [] and q.num_computed_tokens == 0


def test_long_prompt_is_chunked_and_decodes_keep_running():
    s = make(budget=8)
    a, b = seq_of(3, max_tokens=50), seq_of(3, max_tokens=50, start=100)
    s.add(a), s.add(b)
    step(s)                                   # both prompts fit in one step
    long = seq_of(40, start=300)
    s.add(long)
    for _ in range(7):
        chunks, _ = step(s)
        by_seq = {c.seq.seq_id: c.num_new_tokens for c in chunks}
        assert by_seq[a.seq_id] == 1 and by_seq[b.seq_id] == 1        # streams never stall
        assert sum(by_seq.values()) <= 8
        assert chunks[0].seq is a and chunks[1].seq is b              # decodes first
        check_invariants(s)
    assert long.num_computed_tokens == 40 and long.num_output_tokens == 1


def test_only_the_final_chunk_samples():
    s = make(budget=16)
    q = seq_of(40)
    s.add(q)
    flags = [step(s)[0][0].samples for _ in range(3)]
    assert flags == [False, False, True]
    assert q.num_output_tokens == 1


def test_max_num_seqs_limits_running():
    s = make(max_num_seqs=2, budget=64)
    seqs = [seq_of(4, max_tokens=3, start=10 * i) for i in range(5)]
    for q in seqs:
        s.add(q)
    while s.has_unfinished():
        step(s)
        assert len(s.running) <= 2
        check_invariants(s)
    assert all(q.finish_reason == "length" and q.num_output_tokens == 3 for q in seqs)


def test_running_out_of_blocks_preempts_newest_and_everyone_finishes():
    s = make(num_blocks=6, budget=64, caching=False)
    seqs = [seq_of(6, max_tokens=14, start=100 * i) for i in range(3)]   # 20 tokens = 3 blocks each at the end
    for q in seqs:
        s.add(q)
    step(s)
    assert len(s.running) == 3
    order_of_preemption = []
    for _ in range(200):
        before = {q.seq_id: q.metrics.num_preemptions for q in seqs}
        step(s)
        check_invariants(s)
        order_of_preemption += [q.seq_id for q in seqs if q.metrics.num_preemptions > before[q.seq_id]]
        if not s.has_unfinished():
            break
    assert all(q.is_finished and q.num_output_tokens == 14 for q in seqs)
    assert s.num_preemptions > 0
    assert order_of_preemption[0] == seqs[-1].seq_id          # the newest gives way first
    assert s.block_manager.num_free_blocks == 6


def test_preempted_sequence_recomputes_prompt_and_output():
    s = make(num_blocks=3, budget=64, caching=False)
    a, b = seq_of(8, max_tokens=9), seq_of(8, max_tokens=9, start=50)
    s.add(a), s.add(b)
    while b.metrics.num_preemptions == 0:
        step(s)
    assert b.status is SequenceStatus.WAITING and b.num_output_tokens > 0
    generated = b.num_output_tokens
    while not b.is_finished:
        chunks, _ = step(s)
        first_b = next((c for c in chunks if c.seq is b), None)
        if first_b is not None and generated:
            # recompute covers prompt + the output so far, then sampling resumes where it stopped
            assert first_b.num_new_tokens == 8 + generated
            generated = 0
    assert b.num_output_tokens == 9


def test_abort_frees_blocks_at_once():
    s = make(num_blocks=16)
    a, b = seq_of(20, max_tokens=50), seq_of(20, max_tokens=50, start=100)
    s.add(a), s.add(b)
    step(s)
    used = s.block_manager.num_used_blocks
    s.finish(a, "abort")
    assert s.block_manager.num_used_blocks == used - 3
    assert a.finish_reason == "abort" and a not in s.running
    waiting = seq_of(5, start=500)
    s.add(waiting)
    s.finish(waiting, "abort")
    assert waiting not in s.waiting
    step(s)
    assert [q.seq_id for q in s.running] == [b.seq_id]


def test_sequence_outgrowing_whole_cache_finishes_with_length():
    s = make(num_blocks=2, budget=64)
    q = seq_of(10, max_tokens=100)
    s.add(q)
    overflowed = []
    for _ in range(20):
        overflowed += step(s)[1]
        if q.is_finished:
            break
    assert q.finish_reason == "length" and q in overflowed
    assert q.num_tokens == 17 and s.block_manager.num_free_blocks == 2


def test_waiting_prompt_reuses_cached_prefix():
    s = make(budget=64)
    first = seq_of(20, max_tokens=1)
    s.add(first)
    step(s)
    second = seq_of(20, max_tokens=1)
    s.add(second)
    chunks, _ = step(s)
    assert chunks[0].num_new_tokens == 4 and second.metrics.num_cached_tokens == 16


def test_prefill_is_capped_to_the_step_time_target_while_a_stream_decodes():
    s = Scheduler(BlockManager(256, BS), 8, 512, step_target_s=0.05)
    a = seq_of(3, max_tokens=100)
    s.add(a)
    step(s)                                       # a is decoding from here on
    s.observe_step(100, 0.1)                      # 1 ms per token: 50 tokens fit the 50 ms target
    long = seq_of(400, start=500)
    s.add(long)
    chunks, _ = step(s)
    by_seq = {c.seq.seq_id: c.num_new_tokens for c in chunks}
    assert by_seq == {a.seq_id: 1, long.seq_id: 49}   # 50 tokens in all: the decode and 49 of the prompt
    chunks, _ = step(s)
    assert {c.seq.seq_id: c.num_new_tokens for c in chunks} == {a.seq_id: 1, long.seq_id: 49}
    s.observe_step(50, 10.0)                      # a very slow step: the cap falls to its floor
    chunks, _ = step(s)
    assert {c.seq.seq_id: c.num_new_tokens for c in chunks}[long.seq_id] == MIN_PREFILL_CHUNK


def test_no_cap_without_streams_without_a_target_or_before_a_measurement():
    for target, observe, decoding in [(0.05, True, False), (0.0, True, True), (0.05, False, True)]:
        s = Scheduler(BlockManager(256, BS), 8, 512, step_target_s=target)
        if decoding:
            s.add(seq_of(3, max_tokens=100))
            step(s)
        if observe:
            s.observe_step(100, 0.1)
        long = seq_of(600, start=500)
        s.add(long)
        chunks, _ = step(s)
        assert sum(c.num_new_tokens for c in chunks) == 512   # the token budget alone


def test_small_steps_do_not_move_the_cost_estimate():
    s = Scheduler(BlockManager(16, BS), 8, 512, step_target_s=0.05)
    s.observe_step(MIN_TIMED_TOKENS - 1, 5.0)     # a few decodes: fixed costs dominate, not a per-token cost
    assert s.seconds_per_token is None
    s.observe_step(100, 0.1)
    s.observe_step(100, 0.2)
    assert 0.001 < s.seconds_per_token < 0.002    # smoothed toward the newer, slower step

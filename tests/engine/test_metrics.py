"""Metrics: sliding-window rates, gauges, thread-safe snapshots; KV budget sizing."""
from __future__ import annotations

import threading

import pytest

from llmchat.engine import kv_budget
from llmchat.engine.metrics import WINDOW_S, EngineMetrics, MetricsSnapshot


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_rates_over_sliding_window_and_decay():
    clock = Clock()
    m = EngineMetrics(kv_blocks_total=10, kv_cache_gb=0.5, clock=clock)
    for _ in range(10):
        clock.now += 0.5
        m.record_step(prompt_tokens=20, generated_tokens=4, kv_blocks_used=5, num_running=4)
    s = m.snapshot()
    assert s.prompt_tokens_per_s == pytest.approx(200 / WINDOW_S)
    assert s.generation_tokens_per_s == pytest.approx(40 / WINDOW_S)
    assert s.kv_cache_usage == 0.5 and s.num_running == 4 and s.kv_cache_gb == 0.5
    assert (s.total_prompt_tokens, s.total_generation_tokens) == (200, 40)
    clock.now += WINDOW_S + 1              # idle: the rates fall to zero, the totals stay
    s = m.snapshot()
    assert s.generation_tokens_per_s == 0 and s.total_generation_tokens == 40 and s.num_running == 4


def test_rates_count_busy_time_not_idle_time():
    """A reply 1.5 s into a mostly idle window reads its own rate (21 tok/s), not tokens / window."""
    clock = Clock()
    m = EngineMetrics(kv_blocks_total=10, kv_cache_gb=0.5, clock=clock)
    clock.now += 30                         # the engine sat idle long before the reply
    m.record_step(prompt_tokens=40, generated_tokens=1, busy_s=0.1)
    for _ in range(30):                    # 30 decode steps of 1/21 s
        clock.now += 1 / 21
        m.record_step(prompt_tokens=0, generated_tokens=1, busy_s=1 / 21)
    s = m.snapshot()
    assert s.generation_tokens_per_s == pytest.approx(31 / (0.1 + 30 / 21))
    assert s.generation_tokens_per_s > 20 and s.prompt_tokens_per_s == pytest.approx(40 / (0.1 + 30 / 21))
    clock.now += WINDOW_S + 1
    assert m.snapshot().generation_tokens_per_s == 0


def test_rates_count_only_the_steps_inside_the_window():
    clock = Clock()
    m = EngineMetrics(10, 0.5, clock=clock)
    steps, start = [], clock.now
    for i in range(1, 13):                 # one step a second, 7 tokens more each time
        clock.now = start + i
        m.record_step(prompt_tokens=i, generated_tokens=7 * i)
        steps.append((clock.now, i, 7 * i))
        inside = [x for x in steps if x[0] >= clock.now - WINDOW_S]
        s = m.snapshot()
        span = min(WINDOW_S, clock.now - start)
        assert s.prompt_tokens_per_s == pytest.approx(sum(x[1] for x in inside) / span)
        assert s.generation_tokens_per_s == pytest.approx(sum(x[2] for x in inside) / span)


def test_rate_early_on_uses_elapsed_time():
    clock = Clock()
    m = EngineMetrics(10, 0.5, clock=clock)
    clock.now += 1.0
    m.record_step(0, 50)
    assert m.snapshot().generation_tokens_per_s == pytest.approx(50.0)


def test_snapshot_is_frozen_and_consistent_under_concurrent_writes():
    m = EngineMetrics(100, 1.0)
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            m.record_step(1, 1, kv_blocks_used=i % 100, num_running=i % 7)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(2000):
            s = m.snapshot()
            assert s.kv_cache_usage == s.kv_blocks_used / 100
            assert s.total_prompt_tokens == s.total_generation_tokens
    finally:
        stop.set()
        t.join()
    with pytest.raises(Exception):
        s.num_running = 3
    assert isinstance(s, MetricsSnapshot)


def test_kv_budget_default_from_free_ram():
    assert kv_budget.default_kv_cache_gb(12 * kv_budget.GIB) == 3.0
    assert kv_budget.default_kv_cache_gb(kv_budget.GIB // 2) == 0.25
    assert kv_budget.default_kv_cache_gb(100 * kv_budget.GIB) == 8.0
    assert 0.25 <= kv_budget.default_kv_cache_gb() <= 8.0     # this machine's free RAM


def test_kv_blocks_capped_by_what_sequences_can_use():
    block = 1 << 20   # 1 MiB per block
    assert kv_budget.plan_kv_blocks(2.0, block, 16, max_num_seqs=4, max_model_len=160) == (40, 40 / 1024)
    assert kv_budget.plan_kv_blocks(0.01, block, 16, 64, 4096)[0] == 10
    with pytest.raises(ValueError, match="smaller than one KV block"):
        kv_budget.plan_kv_blocks(1e-9, block, 16, 4, 160)

"""Engine-wide counters and a frozen snapshot any thread can read cheaply (the TUI polls it)."""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

WINDOW_S = 5.0   # sliding window of the tokens/s figures (tokens over the time spent in steps within it)


@dataclass(frozen=True)
class MetricsSnapshot:
    prompt_tokens_per_s: float = 0.0
    generation_tokens_per_s: float = 0.0
    kv_cache_usage: float = 0.0            # used blocks / total blocks, 0..1
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    kv_cache_gb: float = 0.0
    prefix_cache_hit_rate: float = 0.0     # prompt tokens served from cache (RAM or disk) / prompt tokens looked up
    prefix_disk_hit_tokens: int = 0        # prompt tokens read from the KV disk tier since start
    prefix_disk_hit_rate: float = 0.0      # of the prompt tokens looked up, those read from disk
    num_running: int = 0
    num_waiting: int = 0
    num_preemptions: int = 0
    total_prompt_tokens: int = 0           # prompt tokens computed (cache hits excluded)
    total_generation_tokens: int = 0
    adapters_resident: list[str] = field(default_factory=list)
    running_per_adapter: dict[str, int] = field(default_factory=dict)
    spec_guessed_tokens: int = 0           # speculation since start: tokens guessed, guesses the model agreed
    spec_accepted_tokens: int = 0          # with, and verifications (a sequence's step with guesses)
    spec_verifications: int = 0

    @property
    def spec_acceptance_rate(self) -> float | None:
        return self.spec_accepted_tokens / self.spec_guessed_tokens if self.spec_guessed_tokens else None

    @property
    def spec_tokens_per_verification(self) -> float | None:
        """Tokens a sequence got from a step in which it guessed (1 without speculation)."""
        if not self.spec_verifications:
            return None
        return (self.spec_accepted_tokens + self.spec_verifications) / self.spec_verifications


class EngineMetrics:
    """Written by the engine thread once per step; snapshot() may be called from any thread."""

    def __init__(self, kv_blocks_total: int, kv_cache_gb: float, clock=time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self._events: deque[tuple[float, int, int, float]] = deque()   # (time, prompt, generated, busy seconds)
        self._start = clock()
        self._total_prompt = 0
        self._total_gen = 0
        self._window_prompt = 0   # sums over _events, kept as they change (a step must not re-add the window)
        self._window_gen = 0
        self._window_busy = 0.0
        self._snapshot = MetricsSnapshot(kv_blocks_total=kv_blocks_total, kv_cache_gb=kv_cache_gb)

    def record_step(self, prompt_tokens: int, generated_tokens: int, busy_s: float | None = None, **state) -> None:
        """Add one step's token counts and how long it took (busy_s; None = unknown); `state` holds the other
        MetricsSnapshot fields (usage, counts...)."""
        now = self._clock()
        with self._lock:
            if prompt_tokens or generated_tokens:
                busy = busy_s if busy_s is not None else 0.0
                self._events.append((now, prompt_tokens, generated_tokens, busy))
                self._window_prompt += prompt_tokens
                self._window_gen += generated_tokens
                self._window_busy += busy
            self._total_prompt += prompt_tokens
            self._total_gen += generated_tokens
            self._snapshot = self._build(now, state)

    def update_state(self, **state) -> None:
        """Refresh gauges (running/waiting, KV usage) without new tokens, e.g. after an abort."""
        with self._lock:
            self._snapshot = self._build(self._clock(), state)

    def snapshot(self) -> MetricsSnapshot:
        now = self._clock()
        with self._lock:
            # Rates decay when the engine is idle, so a reader never sees a stale figure.
            return self._build(now, {})

    def _build(self, now: float, state: dict) -> MetricsSnapshot:
        while self._events and self._events[0][0] < now - WINDOW_S:
            _, prompt, gen, busy = self._events.popleft()
            self._window_prompt -= prompt
            self._window_gen -= gen
            self._window_busy -= busy
        # Over busy time: a reply 1.5 s old reads its real rate, not its tokens spread over the whole window
        # (idle time counted). Steps without a duration (remote streams) fall back to the wall window.
        span = self._window_busy if self._window_busy > 1e-6 else min(WINDOW_S, max(now - self._start, 1e-3))
        prompt, gen = self._window_prompt, self._window_gen
        old = self._snapshot
        values = {f: getattr(old, f) for f in old.__dataclass_fields__}
        values.update(state)
        values.update(prompt_tokens_per_s=prompt / span, generation_tokens_per_s=gen / span,
                      total_prompt_tokens=self._total_prompt, total_generation_tokens=self._total_gen)
        if values["kv_blocks_total"]:
            values["kv_cache_usage"] = values["kv_blocks_used"] / values["kv_blocks_total"]
        return MetricsSnapshot(**values)

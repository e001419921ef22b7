"""What the engine hands back: finished outputs, stream deltas and per-request metrics."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    arrival_time: float = 0.0          # time.monotonic() at submission
    first_token_time: float | None = None
    finish_time: float | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0         # prompt tokens served from the prefix cache (RAM or disk)
    num_disk_cached_tokens: int = 0    # of those, read from the KV disk tier
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    num_guessed_tokens: int = 0        # speculation: tokens guessed for this request, and how many held
    num_accepted_guesses: int = 0
    server_timings: dict | None = None  # a remote server's own figures (llama-server `timings`), when it sends them

    @property
    def ttft(self) -> float | None:
        """Seconds from submission to the first generated token."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Generated tokens after the first, per second of decoding."""
        if self.first_token_time is None or self.finish_time is None or self.num_generated_tokens < 2:
            return None
        elapsed = self.finish_time - self.first_token_time
        return (self.num_generated_tokens - 1) / elapsed if elapsed > 0 else None


@dataclass
class RequestOutput:
    """A finished request (offline API)."""
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str                 # "stop" | "length" | "abort" | "error"
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    adapter: str | None = None
    error: str | None = None


@dataclass
class StreamDelta:
    """New tokens and text of one request since its previous delta (streaming API)."""
    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    metrics: RequestMetrics | None = None
    logprobs: list | None = None       # one logprobs.TokenLogprob per token id, when the request asked

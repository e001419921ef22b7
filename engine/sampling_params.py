"""Per-request sampling settings, validated when a request is submitted."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .generation_defaults import CHAT_DEFAULTS
from .structured_outputs import StructuredOutputs


@dataclass
class SamplingParams:
    """How to pick the next token and when to stop. `None` means "the model's generation_config default"."""

    max_tokens: int | None = None      # None: until the model stops or the context / KV cache is full
    temperature: float | None = None   # 0 = greedy
    top_k: int | None = None           # 0 or -1 = off
    top_p: float | None = None         # 1.0 = off
    min_p: float | None = None         # 0.0 = off
    repetition_penalty: float | None = None   # 1.0 = off (HF semantics: divides positive logits)
    presence_penalty: float = 0.0      # OpenAI semantics, over generated tokens
    frequency_penalty: float = 0.0
    seed: int | None = None            # same seed -> same output, whatever else is in the batch
    stop: list[str] = field(default_factory=list)          # stop strings; never shown in the text
    stop_token_ids: list[int] = field(default_factory=list)  # added to the model's EOS ids
    ignore_eos: bool = False
    logprobs: int | None = None        # None: off; k: each token's logprob and the k most likely (0..20)
    structured_outputs: StructuredOutputs | None = None   # constrain the reply (a JSON schema, regex, grammar...)
    speculative: str | None = None     # this request's guessing: auto, ngram or off; None = EngineConfig.speculative

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens <= 0):
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (off) or a positive integer, got {self.top_k}")
        if self.min_p is not None and not (0.0 <= self.min_p <= 1.0):
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            raise ValueError(f"logprobs must be an integer in [0, 20], got {self.logprobs!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.structured_outputs is not None:
            self.structured_outputs.validate()
        if self.speculative not in (None, "auto", "ngram", "off"):
            raise ValueError(f"speculative must be auto, ngram or off, got {self.speculative!r}")

    def with_defaults(self, defaults: dict) -> "SamplingParams":
        """Fill every None field from `defaults` (generation_defaults.default_values), else llmchat's chat defaults."""
        filled = {}
        for f in fields(self):
            if getattr(self, f.name) is None and f.name in CHAT_DEFAULTS:
                filled[f.name] = defaults.get(f.name, CHAT_DEFAULTS[f.name])
        return replace(self, **filled)

    @property
    def greedy(self) -> bool:
        return self.temperature is not None and self.temperature == 0.0

"""A model the app has loaded: its engine (local or remote) and what the engine panel and memory budget read."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from llmchat.engine.client import EngineClient


@dataclass
class LoadedModel:
    name: str
    path: Path | None                    # None for a remote model
    engine: EngineClient                 # AsyncEngine here, RemoteEngine on a server
    weight_bytes: int
    kv_bytes: int
    generation_defaults: dict = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    active_requests: int = 0
    adapters: set = field(default_factory=set)     # LoRA names loaded into this engine
    weights: str = ""                    # how the weights run: a GGUF quant (Q4_K_M), "q4_k at load", or ""
    remote: bool = False                 # on a remote OpenAI-compatible server (engine: RemoteEngine)
    draft: Path | None = None            # the draft model the engine guesses with, if any
    draft_bytes: int = 0                 # its weights and its KV cache

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.draft_bytes

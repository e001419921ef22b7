"""Plain data the app works on: sessions, their settings and messages. No UI, no engine."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class SessionSettings:
    """Per-session generation settings; None means "the model's generation_config default"."""
    model: str = ""
    adapter: str | None = None
    system_prompt: str = ""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    chat_template: str = ""        # "" = the model's own; a known template's name (engine/chat_templates); "raw"
    thinking: bool | None = None   # a template's enable_thinking switch; None = the template's default
    speculative: str | None = None  # guessing (speculative decoding): auto, ngram or off; None = the engine's
    # a smaller model with the same tokenizer that guesses for it (library name or path); None = the engine's
    # (none unless LLMCHAT_DRAFT_MODEL)
    draft_model: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "SessionSettings":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class ReplyStats:
    """What the stats line under a reply shows."""
    ttft: float | None = None
    tokens_per_s: float | None = None
    num_generated_tokens: int = 0
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_disk_cached_tokens: int = 0            # of those, read from the KV disk tier (a chat reopened warm)
    server_tokens_per_s: float | None = None   # what a remote server reports (llama-server timings)
    guessed_tokens: int = 0                    # speculation: tokens guessed for this reply, and how many held
    accepted_guesses: int = 0

    def line(self) -> str:
        parts = []
        if self.ttft is not None:
            parts.append(f"TTFT {self.ttft * 1000:.0f} ms")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        if self.server_tokens_per_s:
            parts.append(f"server {self.server_tokens_per_s:.1f} tok/s")
        parts.append(f"{self.num_generated_tokens} tokens")
        disk = f" ({self.num_disk_cached_tokens} from disk)" if self.num_disk_cached_tokens else ""
        parts.append(f"{self.num_cached_tokens}/{self.num_prompt_tokens} prompt tokens cached{disk}")
        if self.guessed_tokens:
            parts.append(f"{self.accepted_guesses}/{self.guessed_tokens} guesses held")
        return " · ".join(parts)


@dataclass
class ChatMessage:
    role: str                      # "user" | "assistant"
    content: str
    id: int | None = None
    # assistant only: "stop" | "length" (a max the user set) | "context" (the context was full) | "abort" | "error"
    finish_reason: str | None = None
    stats: ReplyStats | None = None
    model: str = ""
    adapter: str | None = None
    error: str | None = None           # why the reply failed (shown under it while the app runs)

    @property
    def cut_off(self) -> bool:
        return self.role == "assistant" and self.finish_reason in ("length", "abort", "interrupted")


@dataclass
class ChatSession:
    id: int
    title: str
    settings: SessionSettings = field(default_factory=SessionSettings)
    messages: list[ChatMessage] = field(default_factory=list)

    def chat_messages(self, upto: int | None = None) -> list[dict]:
        """The conversation as engine chat messages (system prompt first)."""
        chosen = self.messages if upto is None else self.messages[:upto]
        out = [{"role": "system", "content": self.settings.system_prompt}] if self.settings.system_prompt else []
        out += [{"role": m.role, "content": m.content} for m in chosen]
        return out

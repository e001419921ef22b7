"""Turn what a caller passes as a prompt (text, chat messages or token ids) into prompt token ids."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .chat_templates import NoChatTemplateError, suggested_template
from .tokenizer_snapshot import load_snapshot, save_snapshot

ROLES = ("system", "user", "assistant", "tool")


def validate_messages(messages: list) -> None:
    if not messages:
        raise ValueError("the chat has no messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"message {i} must be a dict with 'role' and 'content'")
        if m["role"] not in ROLES:
            raise ValueError(f"message {i} has unknown role {m['role']!r} (expected one of {', '.join(ROLES)})")
        content = m["content"]
        # a tool's result may be empty, and so may an assistant turn (it only called tools, or said nothing)
        if not isinstance(content, str) or not (content.strip() or m["role"] in ("assistant", "tool")):
            raise ValueError(f"message {i} ({m['role']}) has empty content")


@dataclass(frozen=True)
class Continuation:
    """A reply to go on with: the chat before it and the reply so far. The model picks up where it stopped."""
    messages: list
    partial: str


@dataclass(frozen=True)
class TemplatedChat:
    """Chat messages (or a Continuation) rendered with a chosen template and/or template switches: a session's
    known template for a model without one, or a switch such as enable_thinking. None = the model's own."""
    chat: object
    chat_template: str | None = None
    template_kwargs: dict | None = None


def render_chat(tokenizer, prompt) -> str:
    """Messages, a Continuation or a TemplatedChat of them -> the prompt text the chat template gives."""
    template, kwargs = None, {}
    if isinstance(prompt, TemplatedChat):
        template, kwargs, prompt = prompt.chat_template, dict(prompt.template_kwargs or {}), prompt.chat
    messages = list(prompt.messages if isinstance(prompt, Continuation) else prompt)
    validate_messages(messages)
    if template is None and getattr(tokenizer, "chat_template", None) is None:
        raise NoChatTemplateError(suggested_template(tokenizer))
    kwargs.setdefault("add_generation_prompt", True)   # a TemplatedChat may turn it off (a raw continuation)
    rendered = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, **kwargs)
    if isinstance(prompt, Continuation):
        rendered += prompt.partial
    return rendered


def prompt_to_token_ids(tokenizer, prompt, vocab_size: int) -> list[int]:
    """str -> tokenized as is; list of messages -> chat template + generation prompt; list[int] -> checked."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        ids = list(tokenizer(prompt).input_ids)
    elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
        ids = list(prompt)
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})")
    elif isinstance(prompt, (list, tuple, Continuation, TemplatedChat)):
        rendered = render_chat(tokenizer, prompt)
        # The template already holds BOS and other specials: do not add them a second time.
        ids = list(tokenizer(rendered, add_special_tokens=False).input_ids)
    else:
        raise ValueError(f"a prompt must be text, a list of chat messages or a list of token ids, "
                         f"got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt is empty after tokenization")
    return ids


def load_tokenizer(model_path):
    """The model folder's own tokenizer (and chat template): from its snapshot in the cache when one matches
    the folder (engine/tokenizer_snapshot.py, a fraction of a second), else built by AutoTokenizer (seconds on
    a large vocabulary) and snapshotted for the next start."""

    folder = Path(model_path)
    snapshot = load_snapshot(folder)
    if snapshot is not None:
        return snapshot
    from transformers import AutoTokenizer   # transformers (~2 s): only when no tokenizer snapshot is saved yet
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_path), config=_tokenizer_facts(model_path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load a tokenizer from {model_path}: {exc}") from exc
    save_snapshot(folder, tokenizer)
    return tokenizer


def _tokenizer_facts(model_path):
    """What AutoTokenizer reads of the model's config to choose the tokenizer class (model type and name, a
    declared tokenizer class), on transformers' base config class. Without it, AutoTokenizer builds the
    model's own config class, whose import pulls in transformers' modeling stack, torch.distributed and sympy:
    ~75 MB resident that the engine never uses. None (AutoTokenizer's own lookup) without a config.json."""

    from transformers import PreTrainedConfig   # transformers (~2 s): with AutoTokenizer, as above
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    facts = PreTrainedConfig()
    facts.model_type = raw.get("model_type") or ""
    for key in ("tokenizer_class", "_name_or_path", "model_name"):
        if raw.get(key) is not None:
            setattr(facts, key, raw[key])
    return facts

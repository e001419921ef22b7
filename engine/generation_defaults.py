"""The sampling a request gets for what it leaves unset: one rule, used by the engine and shown by the app.

Where the model's generation_config.json sets a value, it is followed (do_sample=false means greedy); where
it says nothing, llmchat's chat defaults apply. These are the values llama.cpp and Ollama use for chat, so a
model without a generation_config (a GGUF, many Hub repos) gets sensible replies rather than sampling at
temperature 1.0 from the whole vocabulary.

No reply is cut at a fixed length: max_tokens None runs until the model stops or the context (or KV cache) is
full, as llama.cpp and Ollama do. A generation_config's max_new_tokens / max_length is not followed either
(Hugging Face's defaults carry max_length=20, and such values are written for benchmarks, not chats): only a
limit the user sets cuts a reply.
"""
from __future__ import annotations

import json
from pathlib import Path

CHAT_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.0,
                 "max_tokens": None}
MODEL_SOURCE = "generation_config.json"
CHAT_SOURCE = "llmchat chat default"

# generation_config.json name -> SamplingParams name
_KEYS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
         "repetition_penalty": "repetition_penalty"}


def sampling_defaults(gen: dict) -> dict[str, tuple[object, str]]:
    """{SamplingParams field: (value, where it comes from)} for a generation_config dict ({} when absent)."""
    chosen = {name: (value, CHAT_SOURCE) for name, value in CHAT_DEFAULTS.items()}
    for theirs, ours in _KEYS.items():
        if gen.get(theirs) is not None:
            chosen[ours] = (gen[theirs], MODEL_SOURCE)
    if gen.get("do_sample") is False:
        chosen["temperature"] = (0.0, f"greedy: do_sample false in {MODEL_SOURCE}")
    return chosen


def default_values(gen: dict) -> dict:
    return {name: value for name, (value, _) in sampling_defaults(gen).items()}


def read_generation_config(folder: Path) -> dict:
    """The folder's generation_config.json, or {} (absent, unreadable, or not a JSON object)."""
    file = Path(folder) / "generation_config.json"
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

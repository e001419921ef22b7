"""Tiny models, a prompt set and an isolated model library for the compare end-to-end tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiny_models import make_model

SYSTEM = "You are a helpful assistant running on a small local machine. Answer briefly and clearly."
PROMPTS = [
    {"prompt": "Hello world", "system": SYSTEM, "expected": "Hello"},
    {"prompt": "How are you today?", "system": SYSTEM},
    {"messages": [{"role": "user", "content": "The quick brown fox"},
                  {"role": "assistant", "content": "jumps over"},
                  {"role": "user", "content": "the lazy dog?"}], "expected": ["dog", "fox"], "id": "fox"},
    {"prompt": "def add(a, b):", "system": SYSTEM},
    {"prompt": "Once upon a time"},
]


@pytest.fixture(scope="session")
def compare_models(tmp_path_factory) -> dict[str, Path]:
    """Two tiny models of different families, so their answers differ."""
    root = tmp_path_factory.mktemp("compare-models")
    return {"llama": make_model(root / "tiny-llama", "llama", seed=0),
            "qwen": make_model(root / "tiny-qwen", "qwen2", seed=1)}


@pytest.fixture
def prompt_file(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def isolated_library(tmp_path, monkeypatch):
    """Model-store lookups go to an empty library, never the user's."""
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "llmchat-data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))

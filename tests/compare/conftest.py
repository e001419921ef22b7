"""Tiny models, a prompt set and an isolated model library for the compare end-to-end tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from run_args import compare_argv
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


@pytest.fixture(scope="session")
def compare_adapter(compare_models, tmp_path_factory) -> Path:
    """A PEFT LoRA adapter for tiny-llama with random (non-zero) weights, so it changes the answers."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(compare_models["llama"], dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                        init_lora_weights=False)
    folder = tmp_path_factory.mktemp("compare-adapter") / "tiny-lora"
    get_peft_model(base, config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("compare-prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def straight_run(compare_models, compare_adapter, prompt_file, tmp_path_factory) -> Path:
    """The standard run done once, uninterrupted, in process (library isolated like the tests)."""
    import os

    from llmchat.tui.cli import main
    root = tmp_path_factory.mktemp("compare-straight")
    saved = {k: os.environ.get(k) for k in ("LLMCHAT_DATA_DIR", "HF_HUB_CACHE")}
    os.environ.update(LLMCHAT_DATA_DIR=str(root / "data"), HF_HUB_CACHE=str(root / "hf"))
    try:
        assert main([*compare_argv(compare_models, compare_adapter, prompt_file), "--out", str(root / "out")]) == 0
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return root / "out"


@pytest.fixture(autouse=True)
def isolated_library(tmp_path, monkeypatch):
    """Model-store lookups go to an empty library, never the user's."""
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "llmchat-data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))

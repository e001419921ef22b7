"""TUI test fixtures: isolated data/config/HF-cache dirs and tiny models for the real engine."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomli_w

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import make_model  # noqa: E402

# Small KV caches: several engines share 2 cores and the tests' RAM.
TEST_SETTINGS = {"memory_budget_gb": 4.0, "kv_cache_gb": 0.03}


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Data, config and HF cache dirs under tmp_path, with small-engine settings written."""
    data, config, hf = tmp_path / "data", tmp_path / "config", tmp_path / "hf"
    for folder in (data, config, hf):
        folder.mkdir()
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(data))
    monkeypatch.setenv("LLMCHAT_CONFIG_DIR", str(config))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (config / "settings.toml").write_text(tomli_w.dumps(TEST_SETTINGS))
    return {"data": data, "config": config, "hf": hf}


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory) -> Path:
    """Greedy by default (generation_config do_sample=False): replies are deterministic."""
    return make_model(tmp_path_factory.mktemp("chat-model"), "llama")


@pytest.fixture(scope="session")
def long_model(tmp_path_factory) -> Path:
    """EOS is an id the tokenizer never produces: every reply runs to max_tokens (stop / continue tests)."""
    return make_model(tmp_path_factory.mktemp("long-model"), "llama", eos_token_id=383)


@pytest.fixture(scope="session")
def draft_model(tmp_path_factory) -> Path:
    """A draft for chat_model and long_model: their tokenizer, one layer of other weights (smaller)."""
    return make_model(tmp_path_factory.mktemp("draft-model"), "llama", seed=7, num_hidden_layers=1)

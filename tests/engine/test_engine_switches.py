"""EngineConfig holds the A/B switches: fast paths by default, the LLMCHAT_* environment variables override
the defaults (a benchmark run), an explicit field overrides both, and a bad value is a clear error."""
from __future__ import annotations

import pytest

from llmchat.engine.config import DEFAULT_SMALL_M_MAX, EngineConfig

SWITCHES = ("LLMCHAT_SMALL_M_MAX", "LLMCHAT_DECODER_STACK", "LLMCHAT_LORA_FUSED")


@pytest.fixture
def clean_env(monkeypatch):
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_are_the_fast_paths(clean_env):
    config = EngineConfig("m")
    assert config.small_m_max == DEFAULT_SMALL_M_MAX
    assert config.decoder_stack and config.lora_fused and config.pack_bf16


def test_environment_overrides_the_defaults(clean_env):
    clean_env.setenv("LLMCHAT_SMALL_M_MAX", "0")
    clean_env.setenv("LLMCHAT_DECODER_STACK", "0")
    clean_env.setenv("LLMCHAT_LORA_FUSED", "0")
    config = EngineConfig("m")
    assert (config.small_m_max, config.decoder_stack, config.lora_fused) == (0, False, False)
    explicit = EngineConfig("m", small_m_max=8, decoder_stack=True, lora_fused=True)
    assert (explicit.small_m_max, explicit.decoder_stack, explicit.lora_fused) == (8, True, True)


def test_bad_values_say_what_is_wrong(clean_env):
    clean_env.setenv("LLMCHAT_DECODER_STACK", "off")
    with pytest.raises(ValueError, match="LLMCHAT_DECODER_STACK must be an integer"):
        EngineConfig("m")
    clean_env.delenv("LLMCHAT_DECODER_STACK")
    with pytest.raises(ValueError, match="small_m_max must be >= 0"):
        EngineConfig("m", small_m_max=-1)

"""One rule for unset sampling values: the model's generation_config where it sets them, llmchat's chat
defaults where it says nothing (the real engine on tiny models)."""
from __future__ import annotations

import json

import pytest
from tiny_models import make_model

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.generation_defaults import CHAT_DEFAULTS, sampling_defaults
from llmchat.tui.app.engines import read_generation_defaults


def model_with(tmp_path, gen: dict | None):
    folder = make_model(tmp_path / "m", "llama")
    if gen is None:
        (folder / "generation_config.json").unlink()
    else:
        (folder / "generation_config.json").write_text(json.dumps(gen))
    return folder


@pytest.mark.parametrize("gen, expected, from_model", [
    (None, CHAT_DEFAULTS, set()),                                          # a GGUF import: nothing said
    ({"eos_token_id": 2}, CHAT_DEFAULTS, set()),                           # a file that says nothing on sampling
    ({"temperature": 0.6, "top_p": 0.9}, {**CHAT_DEFAULTS, "temperature": 0.6, "top_p": 0.9},
     {"temperature", "top_p"}),                                            # no do_sample: still sampled
    ({"do_sample": False, "temperature": 0.6}, {**CHAT_DEFAULTS, "temperature": 0.0}, {"temperature"}),
    # a length in the model's file never cuts a chat reply (HF's defaults carry max_length=20): only the user's
    ({"do_sample": True, "top_k": 20, "max_new_tokens": 64, "max_length": 20}, {**CHAT_DEFAULTS, "top_k": 20},
     {"top_k"}),
])
def test_engine_and_settings_dialog_agree(tmp_path, gen, expected, from_model):
    folder = model_with(tmp_path, gen)
    llm = LLM(folder, attention_backend="torch", kv_cache_gb=0.02)
    assert llm.engine.generation_defaults == expected
    shown = read_generation_defaults(folder)                               # what F3 shows
    assert {name: value for name, (value, _) in shown.items()} == expected
    assert {name for name, (_, source) in shown.items() if "generation_config.json" in source} == from_model


def test_without_a_generation_config_replies_are_sampled_with_chat_defaults(tmp_path):
    """Not greedy (temperature 0.8): seeds give different replies; the same seed the same reply."""
    llm = LLM(model_with(tmp_path, None), attention_backend="torch", kv_cache_gb=0.02)
    chat = [{"role": "user", "content": "hello"}]
    outs = llm.generate([chat] * 6, [SamplingParams(max_tokens=12, seed=s, ignore_eos=True) for s in range(6)])
    assert len({tuple(o.token_ids) for o in outs}) > 1
    again = llm.generate([chat], SamplingParams(max_tokens=12, seed=3, ignore_eos=True))[0]
    assert again.token_ids == outs[3].token_ids
    greedy = llm.generate([chat] * 2, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    assert greedy[0].token_ids == greedy[1].token_ids


def test_a_request_value_beats_every_default():
    params = SamplingParams(temperature=0.3).with_defaults({"temperature": 0.9, "top_k": 7})
    assert (params.temperature, params.top_k, params.top_p) == (0.3, 7, CHAT_DEFAULTS["top_p"])
    assert sampling_defaults({})["min_p"] == (0.05, "llmchat chat default")
    assert SamplingParams().with_defaults({}).max_tokens is None     # no limit unless the user sets one

"""Loading model folders: tied embeddings, shards, dtypes, config/generation_config facts, clear errors."""
from __future__ import annotations

import json

import pytest
import torch
from model_harness import Blocks, Seq, greedy, hf_greedy, hf_last_logits, hf_model, make_runner, prompt, step
from safetensors.torch import load_file, save_file
from tiny_models import make_model

from llmchat.engine.model_loader import cpu_supports_fp16, resolve_dtype


def test_tied_embeddings(tmp_path):
    folder = make_model(tmp_path, "qwen2", tie_word_embeddings=True)
    assert not any(k.startswith("lm_head") for k in load_file(folder / "model.safetensors"))
    runner, hf = make_runner(folder), hf_model(folder)
    assert runner.model.lm_head.weight is runner.model.model.embed_tokens.weight
    ids = prompt(30, 1)
    logits = step(runner, Blocks(runner), [(Seq(0, ids), 30)])
    torch.testing.assert_close(logits[0], hf_last_logits(hf, ids), atol=2e-4, rtol=0)


def test_sharded_safetensors(tmp_path):
    folder = make_model(tmp_path, "llama", max_shard_size="60KB")
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 2 and (folder / "model.safetensors.index.json").exists()
    runner, hf = make_runner(folder), hf_model(folder)
    ids = prompt(25, 2)
    tokens, _ = greedy(runner, Blocks(runner), [ids], max_new=10)
    assert tokens[0] == hf_greedy(hf, ids, 10)[0]


def test_missing_shard_is_a_clear_error(tmp_path):
    folder = make_model(tmp_path, "llama", max_shard_size="60KB")
    sorted(folder.glob("*.safetensors"))[0].unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        make_runner(folder)


def test_bfloat16_load_runs_and_stays_close(tmp_path):
    folder = make_model(tmp_path, "qwen3")
    runner, hf = make_runner(folder, dtype="bfloat16"), hf_model(folder)
    assert runner.dtype == torch.bfloat16
    qkv = runner.model.model.layers[0].self_attn.qkv_proj
    assert (qkv.weight if qkv.weight is not None else qkv.packed_weight).dtype == torch.bfloat16
    blocks = Blocks(runner)
    assert runner.key_caches[0].dtype == torch.bfloat16
    ids = prompt(40, 3)
    logits = step(runner, blocks, [(Seq(0, ids), 40)])[0]
    ref = hf_last_logits(hf, ids)
    assert logits.dtype == torch.float32
    assert (logits - ref).abs().max() < 0.05 * ref.abs().max()
    assert int(logits.argmax()) == int(ref.argmax())


def test_auto_dtype_follows_config_and_falls_back_from_fp16():
    assert resolve_dtype("auto", {"dtype": "bfloat16"}) == torch.bfloat16
    assert resolve_dtype("auto", {"torch_dtype": "float32"}) == torch.float32
    assert resolve_dtype("auto", {}) == torch.float32
    assert resolve_dtype("auto", {"torch_dtype": "float16"}) in (torch.float16, torch.bfloat16)
    native_fp16 = torch.float16 if cpu_supports_fp16() else torch.bfloat16
    assert resolve_dtype("float16", {}) == native_fp16
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8", {})


def test_model_facts_from_config_and_generation_config(tmp_path):
    folder = make_model(tmp_path, "mistral", generation_config={
        "eos_token_id": [2, 5], "do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
        "repetition_penalty": 1.1, "max_new_tokens": 64})
    runner = make_runner(folder, max_model_len=256)
    assert runner.eos_token_ids == [2, 5]
    # min_p, which the model leaves unset, is the chat default; max_new_tokens cuts no reply (no limit)
    assert runner.generation_defaults == {"temperature": 0.7, "top_k": 20, "top_p": 0.8,
                                          "repetition_penalty": 1.1, "max_tokens": None, "min_p": 0.05}
    assert runner.max_model_len == 256 and runner.vocab_size == 384
    assert runner.raw_config["model_type"] == "mistral"
    # K and V, 2 layers, 2 kv heads, 16 tokens, head_dim 16, fp32
    assert runner.kv_block_bytes() == 2 * 2 * 2 * 16 * 16 * 4
    with pytest.raises(ValueError, match="max_model_len"):
        make_runner(folder, max_model_len=10_000)


def test_greedy_generation_config_means_temperature_zero(tmp_path):
    folder = make_model(tmp_path, "llama", generation_config={"eos_token_id": 4})
    runner = make_runner(folder)
    assert runner.generation_defaults["temperature"] == 0.0
    assert runner.eos_token_ids == [2, 4]


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    folder = make_model(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        make_runner(folder)


def test_missing_weight_is_a_clear_error(tmp_path):
    folder = make_model(tmp_path, "qwen2")
    state = load_file(folder / "model.safetensors")
    del state["model.layers.1.self_attn.k_proj.bias"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing weights: model.layers.1.self_attn.qkv_proj.bias"):
        make_runner(folder)


def test_wrong_shape_is_a_clear_error(tmp_path):
    folder = make_model(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"mlp\.\w+_proj\.weight has shape .* the config expects"):
        make_runner(folder)


def test_bin_only_folder_and_missing_folder(tmp_path):
    folder = make_model(tmp_path / "m", "llama")
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors"):
        make_runner(folder)
    with pytest.raises(FileNotFoundError, match="not found"):
        make_runner(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        make_runner(tmp_path / "empty")

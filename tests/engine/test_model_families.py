"""What the newer families add beyond the shared fidelity tests (tests/engine/test_fidelity.py and
test_model_fidelity.py run every family of tiny_models.ARCHS): Phi-3's long LongRoPE factors, SmolLM3 with
YaRN, Gemma 3 configs written before transformers 5, the multimodal Gemma 3 checkpoint's text part, and that
the store lists exactly the engine's families."""
from __future__ import annotations

import json

import pytest
import torch
from model_harness import Blocks, greedy, hf_greedy, hf_model, make_runner, prompt
from tiny_models import PHI3_LONG, PHI3_SHORT, config_for, make_model
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from llmchat.engine.layers.rotary import compute_inv_freq
from llmchat.engine.models import SUPPORTED_ARCHITECTURES, ModelArgs
from llmchat.engine.store.support import GGUF_ARCHITECTURES, architecture_reason
from llmchat.engine.store.support import SUPPORTED_ARCHITECTURES as STORE_ARCHITECTURES

ARCH_CLASSES = {"smollm3": "SmolLM3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}


def args_of(arch: str, **overrides) -> ModelArgs:
    return ModelArgs.from_config({**config_for(arch, **overrides).to_dict(), "architectures": [ARCH_CLASSES[arch]]})


def assert_greedy_matches(folder, prompts, max_new=10, **engine):
    runner, hf = make_runner(folder, "kernels", **engine), hf_model(folder)
    tokens, rows = greedy(runner, Blocks(runner), prompts, max_new=max_new, chunk=16)
    for ids, got, got_rows in zip(prompts, tokens, rows):
        want, want_rows = hf_greedy(hf, ids, max_new)
        assert got == want
        for a, b in zip(got_rows, want_rows):
            torch.testing.assert_close(a, b, atol=2e-4, rtol=0)
    return runner


def test_store_and_engine_know_the_same_families():
    """search, its support filter and `models list` all judge a model by architecture_reason."""
    assert set(STORE_ARCHITECTURES) == set(SUPPORTED_ARCHITECTURES)
    assert set(GGUF_ARCHITECTURES.values()) <= set(SUPPORTED_ARCHITECTURES)
    for arch in ("GraniteForCausalLM", "Phi3ForCausalLM", "SmolLM3ForCausalLM", "Gemma3ForCausalLM",
                 "Gemma3ForConditionalGeneration"):
        assert architecture_reason({"architectures": [arch]}) == ""
    assert "Gemma2ForCausalLM" in architecture_reason({"architectures": ["Gemma2ForCausalLM"]})


def test_phi3_longrope_factor_set_is_picked_once_from_max_model_len():
    config = config_for("phi3", original_max_position_embeddings=64)
    for seq_len, factors in ((None, PHI3_SHORT), (65, PHI3_LONG)):
        want, want_scale = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=seq_len)
        got, got_scale = compute_inv_freq(config.to_dict(), 16, max_positions=seq_len or 64)
        assert torch.equal(got, want) and got.shape == (6,) and got_scale == want_scale > 1.0
    assert not torch.equal(compute_inv_freq(config.to_dict(), 16, 64)[0], compute_inv_freq(config.to_dict(), 16, 65)[0])


def test_phi3_long_factors_past_the_original_context_match_transformers(tmp_path):
    """max_model_len 512 > original 64: long factors for every position, as transformers once the sequence
    is longer than 64 (the prompts are, from their first forward on)."""
    folder = make_model(tmp_path, "phi3", original_max_position_embeddings=64)
    assert_greedy_matches(folder, [prompt(70, 1), prompt(90, 2)])


def test_smollm3_with_yarn_and_nope_layers_matches_transformers(tmp_path):
    folder = make_model(tmp_path, "smollm3", no_rope_layers=[0, 1],
                        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                                         "rope_theta": 10000.0})
    runner = assert_greedy_matches(folder, [prompt(40, 3), prompt(9, 4)])
    assert [layer.self_attn.rotary_cache is None for layer in runner.model.model.layers] == [True, False]


def test_smollm3_sliding_window_only_when_switched_on():
    off = args_of("smollm3", sliding_window=8)
    on = args_of("smollm3", sliding_window=8, use_sliding_window=True, layer_types=["sliding_attention", "full_attention"])
    assert off.sliding_windows == [-1, -1] and on.sliding_windows == [8, -1]


def test_gemma3_config_written_before_transformers_5_reads_the_same():
    """Hub checkpoints spell Gemma's RoPE as rope_theta + rope_local_base_freq + rope_scaling and give the
    sliding-window pattern instead of layer_types."""
    new = {**config_for("gemma3", num_hidden_layers=6, layer_types=None).to_dict(), "architectures": ["Gemma3ForCausalLM"]}
    old = {k: v for k, v in new.items() if k not in ("rope_parameters", "layer_types")}
    old.update(rope_theta=1e6, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0},
               sliding_window_pattern=6)
    a, b = ModelArgs.from_config(new), ModelArgs.from_config(old)
    assert a.rope_layers == b.rope_layers == ["sliding_attention"] * 5 + ["full_attention"]
    assert a.sliding_windows == b.sliding_windows == [20] * 5 + [-1]
    for kind in ("sliding_attention", "full_attention"):
        assert torch.equal(compute_inv_freq(new, 16, layer_type=kind)[0], compute_inv_freq(old, 16, layer_type=kind)[0])
    assert a.attention_scale == 24 ** -0.5 and a.embedding_scale == 64 ** 0.5 and a.tie_word_embeddings


def test_gemma3_multimodal_checkpoint_runs_its_text_part(tmp_path):
    """Gemma3ForConditionalGeneration (4B and up): the language model's weights and text_config; the vision
    tower is left out. Replies equal transformers' text-only generate of the whole model."""
    from transformers import AutoModelForImageTextToText, Gemma3Config, SiglipVisionConfig

    from tiny_models import make_tokenizer
    text = config_for("gemma3").to_dict()
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    config = Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          image_token_index=300, boi_token_index=301, eoi_token_index=302)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(3.0) if p.dim() == 2 else p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp_path)
    make_tokenizer().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["Gemma3ForConditionalGeneration"]
    runner = make_runner(tmp_path, "kernels")
    prompts = [prompt(30, 5), prompt(7, 6)]
    tokens, _ = greedy(runner, Blocks(runner), prompts, max_new=8, chunk=16)
    model.eval()
    for ids, got in zip(prompts, tokens):
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=8, eos_token_id=None)
        assert got == out[0, len(ids):].tolist()


def test_models_list_runs_a_multimodal_gemma3_as_text_only(tmp_path, monkeypatch, capsys):
    """The library says a Gemma3ForConditionalGeneration folder runs, with the note that images do not."""
    from llmchat.engine.store import ModelStore
    from llmchat.tui.cli import main as cli_main
    folder = make_model(tmp_path / "g", "gemma3")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"architectures": ["Gemma3ForConditionalGeneration"],
                                                    "model_type": "gemma3", "text_config": config}))
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    model = ModelStore(tmp_path / "data").import_path(folder)
    assert model.supported and "images are not supported" in model.reason
    assert cli_main(["models", "list"]) == 0
    assert "ok (text only: images are not supported)" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["kernels", "torch"])
def test_gemma3_sliding_layers_past_the_window_over_cached_blocks(tiny_model_dir, backend):
    """Window 20 on the local layer: a second prompt reuses 64 cached tokens (4 blocks, past the window) and
    both replies equal transformers'."""
    from engine_helpers import hf_greedy as hf_engine_greedy

    from llmchat.engine import LLM, SamplingParams
    folder = tiny_model_dir("gemma3")
    llm = LLM(folder, attention_backend=backend, max_num_batched_tokens=24)
    greedy_12 = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    shared = prompt(64, 21)
    first = llm.generate([shared + prompt(6, 22)], greedy_12)[0]
    second = llm.generate([shared + prompt(10, 23)], greedy_12)[0]
    assert second.metrics.num_cached_tokens == 64 > 20
    for out in (first, second):
        assert out.token_ids == hf_engine_greedy(folder, out.prompt_token_ids, 12, ignore_eos=True)

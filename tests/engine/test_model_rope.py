"""RoPE variants (default, linear, llama3, yarn; longrope in test_model_families.py) in both config styles, against transformers."""
from __future__ import annotations

import json

import pytest
import torch
from model_harness import Blocks, greedy, hf_greedy, hf_model, make_runner, prompt
from tiny_models import config_for, make_model
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from llmchat.engine.layers.rotary import compute_inv_freq, rope_parameters

VARIANTS = {
    "default": {"rope_type": "default", "rope_theta": 500000.0},
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "rope_theta": 10000.0},
}


def to_transformers4_style(folder, params: dict) -> None:
    """Rewrite config.json the way transformers-4 checkpoints on the Hub spell RoPE."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.pop("rope_parameters", None)
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "rope_type")}
    config["rope_theta"] = params["rope_theta"]
    config["rope_scaling"] = {"type": params["rope_type"], **scaling} if params["rope_type"] != "default" else None
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("kind", [k for k in VARIANTS if k != "default"])
def test_inv_freq_equals_transformers_exactly(kind):
    hf_config = config_for("llama", rope_parameters=dict(VARIANTS[kind]))
    want, want_scale = ROPE_INIT_FUNCTIONS[kind](hf_config, "cpu")
    got, got_scale = compute_inv_freq(hf_config.to_dict(), head_dim=16)
    assert torch.equal(got, want)
    assert got_scale == pytest.approx(want_scale, rel=0, abs=0)


def test_both_config_styles_read_the_same():
    new = {"max_position_embeddings": 512, "rope_parameters": dict(VARIANTS["llama3"])}
    old = {"max_position_embeddings": 512, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}}
    assert rope_parameters(new) == rope_parameters(old)
    assert rope_parameters({"max_position_embeddings": 8, "rope_theta": 1e6})["rope_theta"] == 1e6
    with pytest.raises(ValueError, match="unsupported RoPE type 'dynamic'"):   # NTK: rescales with the length
        rope_parameters({"max_position_embeddings": 8, "rope_scaling": {"type": "dynamic"}})


@pytest.mark.parametrize("arch,kind,style", [
    ("llama", "linear", 5), ("llama", "llama3", 4), ("llama", "yarn", 5),
    ("qwen2", "yarn", 4), ("qwen2", "linear", 4), ("mistral", "default", 4),
])
def test_rope_variant_model_matches_transformers(tmp_path, arch, kind, style):
    params = dict(VARIANTS[kind])
    folder = make_model(tmp_path, arch, rope_parameters=dict(params))
    if style == 4:
        to_transformers4_style(folder, params)
    runner, hf = make_runner(folder), hf_model(folder)
    ids = prompt(150, 5)  # past original_max_position_embeddings, where the variants differ
    tokens, rows = greedy(runner, Blocks(runner, num_blocks=32), [ids], max_new=8, chunk=64)
    want, want_rows = hf_greedy(hf, ids, 8)
    assert tokens[0] == want
    for a, b in zip(rows[0], want_rows):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=0)

"""Tiny GGUF models of each family, written once per session, and a store to register them in."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "lora"))   # lora_helpers, for adapters on a GGUF base

from gguf_models import MIXED, write_gguf  # noqa: E402
from llmchat.engine.store import ModelStore  # noqa: E402
from tiny_models import make_model, make_tokenizer  # noqa: E402

SIZES = dict(hidden_size=256, intermediate_size=512)   # whole Q4_K super-blocks on most rows
# what llama.cpp's files cannot say, the source must not need: smollm3 NoPE every fourth layer, gemma3 one
# global layer after five local ones and queries scaled by head_dim
GGUF_SHAPES = {"smollm3": dict(num_hidden_layers=4, no_rope_layers=None),
               "gemma3": dict(num_hidden_layers=6, layer_types=None, query_pre_attn_scalar=16)}


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory):
    """arch -> tiny HF folder with GGUF-friendly sizes."""
    made = {}

    def get(arch: str):
        if arch not in made:
            made[arch] = make_model(tmp_path_factory.mktemp(f"qsrc-{arch}"), arch,
                                    vocab_size=len(make_tokenizer()), **SIZES, **GGUF_SHAPES.get(arch, {}))
        return made[arch]
    return get


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory, tiny_source):
    """(arch, mix name) -> GGUF path; mixes: "mixed" (a Q4_K_M-like mix of every type), "q8_0", "q4_0", "f32" (lossless)."""
    mixes = {"mixed": MIXED, "q8_0": {r: "Q8_0" for r in MIXED}, "q4_0": {**{r: "Q4_0" for r in MIXED}, "embd": "Q8_0"},
             "f32": {}}
    made = {}

    def get(arch: str, mix: str = "mixed"):
        if (arch, mix) not in made:
            out = tmp_path_factory.mktemp(f"gguf-{arch}-{mix}") / f"tiny-{arch}-{mix}.gguf"
            made[arch, mix] = write_gguf(tiny_source(arch), out, mixes[mix])
        return made[arch, mix]
    return get


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A library and Hub cache of the test's own: where the CLI registers the GGUF a command is given."""
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return ModelStore(tmp_path / "data")

"""Library over imported folders: register vs copy, describe, resolve, remove, refusals. No network."""
from __future__ import annotations

import json
import shutil

import pytest

from llmchat.engine.store import ModelStore, StoreError


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return ModelStore(tmp_path / "data")


def test_register_folder_lists_metadata_without_copying(store, tiny_model_dir):
    src = tiny_model_dir("qwen3")
    model = store.import_path(src)
    assert model.path == src.resolve() and model.source == "folder"
    listed = {m.name: m for m in store.list()}[model.name]
    assert listed.supported and listed.reason == ""
    assert listed.architecture == "Qwen3ForCausalLM"
    assert listed.dtype == "float32" and listed.context_length == 512
    cfg = json.loads((src / "config.json").read_text())
    assert listed.num_params > cfg["vocab_size"] * cfg["hidden_size"]
    assert listed.size_bytes >= (src / "model.safetensors").stat().st_size
    assert store.resolve(model.name) == src.resolve()
    assert store.remove(model.name) == 0  # only unregistered: the user's folder stays
    assert (src / "model.safetensors").exists()
    assert store.list() == []


def test_copy_import_owns_files_and_remove_frees_them(store, tiny_model_dir):
    model = store.import_path(tiny_model_dir("llama"), copy=True, name="my-llama")
    assert model.source == "copy" and store.data_dir in model.path.parents
    size = model.size_bytes
    assert store.remove("my-llama") == size
    assert not model.path.exists()


def test_truncated_folder_refused_and_resolve_explains(store, tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir("llama"), broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(StoreError, match="truncated"):
        store.import_path(broken)
    with pytest.raises(StoreError, match="truncated"):
        store.resolve(broken)


def test_unsupported_architecture_listed_with_reason(store, tiny_model_dir, tmp_path):
    other = tmp_path / "gemma-like"
    shutil.copytree(tiny_model_dir("llama"), other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["architectures"] = ["Gemma2ForCausalLM"]
    (other / "config.json").write_text(json.dumps(cfg))
    model = store.import_path(other)
    assert not model.supported and "Gemma2ForCausalLM" in model.reason and "Llama" in model.reason
    with pytest.raises(StoreError, match="Gemma2ForCausalLM"):
        store.resolve(model.name)


def test_bin_only_folder_refused(store, tmp_path):
    folder = tmp_path / "binonly"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(StoreError, match=".bin"):
        store.import_path(folder)


def test_unknown_name_is_a_clear_error(store):
    with pytest.raises(FileNotFoundError, match="no model named"):
        store.resolve("nope/nothing")
    with pytest.raises(FileNotFoundError):
        store.remove("nothing")

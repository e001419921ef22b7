"""Hub search through huggingface_hub's list_models against the stand-in Hub."""
from __future__ import annotations

import json
import shutil

import pytest

from fake_hub import FakeRepo


@pytest.fixture
def catalog(hub, tiny_model_dir, tmp_path):
    def variant(name, arch=None, **cfg_changes):
        folder = tmp_path / name
        shutil.copytree(tiny_model_dir("llama"), folder)
        cfg = json.loads((folder / "config.json").read_text())
        if arch:
            cfg["architectures"] = [arch]
        cfg.update(cfg_changes)
        (folder / "config.json").write_text(json.dumps(cfg))
        return folder

    hub.add(FakeRepo.from_folder("org/chat-llama", tiny_model_dir("llama"), downloads=50, likes=1,
                                 last_modified="2025-03-01T00:00:00.000Z"))
    hub.add(FakeRepo.from_folder("org/chat-qwen3", tiny_model_dir("qwen3"), downloads=10, likes=9,
                                 last_modified="2025-05-01T00:00:00.000Z"))
    hub.add(FakeRepo.from_folder("org/chat-gemma", variant("g", "Gemma2ForCausalLM"), downloads=99))
    hub.add(FakeRepo.from_folder("org/chat-gptq", variant("q", quantization_config={"quant_method": "gptq"}),
                                 downloads=98))
    binonly = FakeRepo.from_folder("org/chat-bin", tiny_model_dir("mistral"), downloads=97)
    binonly.files["pytorch_model.bin"] = binonly.files.pop("model.safetensors")
    hub.add(binonly)
    hub.add(FakeRepo.from_folder("org/other-thing", tiny_model_dir("qwen2"), downloads=1000))
    return hub


def test_search_filters_to_engine_architectures_with_reasons(store, catalog):
    found = store.search("chat")
    assert [m.repo_id for m in found] == ["org/chat-llama", "org/chat-qwen3"]  # by downloads
    llama = found[0]
    assert llama.architecture == "LlamaForCausalLM" and llama.supported and not llama.gated
    assert llama.num_params > 0 and llama.download_size == llama.num_params * 4  # fp32 weights
    everything = {m.repo_id: m for m in store.search("chat", include_unsupported=True)}
    assert "Gemma2ForCausalLM" in everything["org/chat-gemma"].reason
    assert "gptq" in everything["org/chat-gptq"].reason
    assert ".bin" in everything["org/chat-bin"].reason
    assert not any(m.supported for k, m in everything.items() if k not in ("org/chat-llama", "org/chat-qwen3"))


@pytest.mark.parametrize("sort,first", [("downloads", "org/chat-llama"), ("likes", "org/chat-qwen3"),
                                        ("recent", "org/chat-qwen3")])
def test_sorting(store, catalog, sort, first):
    assert store.search("chat", sort=sort)[0].repo_id == first


def test_bad_sort_and_limit(store, catalog):
    with pytest.raises(ValueError, match="sort"):
        store.search("chat", sort="stars")
    assert len(store.search("chat", limit=1)) == 1

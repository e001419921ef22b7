"""An adapter that does not fit, or is malformed, raises a clear ValueError; nothing changes and the engine
keeps serving (including an adapter of the same name that was loaded before)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from lora_helpers import edit_config, make_adapter
from safetensors.torch import load_file, save_file
from tiny_models import make_model

from llmchat.engine import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
PROMPT = [5, 17, 42, 99, 120, 7]


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    """An engine serving adapter "good", and the output it gives, to compare after every failure."""
    model = tiny_model_dir("llama")
    good = make_adapter(model, tmp_path_factory.mktemp("good") / "good", seed=5)
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("good", good)
    expected = llm.generate([PROMPT], GREEDY, adapter="good")[0].token_ids
    return llm, model, good, expected


def _copy(good, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(good, folder)
    return folder


def _rewrite_weights(folder, change):
    path = folder / "adapter_model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def _bad_shapes(good, tmp_path, tiny_model_dir):
    wider = make_model(tmp_path / "wider", "llama", hidden_size=96)   # same family, other shapes
    folder = make_adapter(wider, tmp_path / "bad", seed=1)
    edit_config(folder, base_model_name_or_path=None)                # only the shapes can tell
    return folder


def _other_base(good, tmp_path, tiny_model_dir):
    other = make_model(tmp_path / "another-model", "llama", seed=9)   # fits by shape, but another model
    return make_adapter(other, tmp_path / "bad", seed=1)


def _unknown_module(good, tmp_path, tiny_model_dir):
    return make_adapter(tiny_model_dir("llama"), tmp_path / "bad", targets=("lm_head",))


def _dora(good, tmp_path, tiny_model_dir):
    return make_adapter(tiny_model_dir("llama"), tmp_path / "bad", targets=("q_proj",), use_dora=True)


def _modules_to_save(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    edit_config(folder, modules_to_save=["lm_head"])
    return folder


def _truncated(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    path = folder / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:200])
    return folder


def _bad_json(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    (folder / "adapter_config.json").write_text("{not json")
    return folder


def _missing_weights(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    (folder / "adapter_model.safetensors").unlink()
    return folder


def _a_without_b(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    _rewrite_weights(folder, lambda t: t.pop(next(k for k in t if k.endswith("q_proj.lora_B.weight"))))
    return folder


def _rank_disagrees(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    edit_config(folder, r=3)
    return folder


def _nan_weights(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    _rewrite_weights(folder, lambda t: t[next(iter(t))].fill_(float("nan")))
    return folder


def _not_lora(good, tmp_path, tiny_model_dir):
    folder = _copy(good, tmp_path)
    edit_config(folder, peft_type="IA3")
    return folder


CASES = [
    (_bad_shapes, "do not fit the base projection"),
    (_other_base, "trained for .*another-model"),
    (_unknown_module, "unsupported tensor .*lm_head"),
    (_dora, "DoRA"),
    (_modules_to_save, "modules_to_save"),
    (_truncated, "malformed safetensors"),
    (_bad_json, "unreadable adapter config"),
    (_missing_weights, "adapter_model.safetensors is missing"),
    (_a_without_b, "not both A and B"),
    (_rank_disagrees, "rank 8 but the config says r=3"),
    (_nan_weights, "NaN or infinite"),
    (_not_lora, "peft_type IA3 is not supported"),
]


@pytest.mark.parametrize("make_bad,message", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_bad_adapter_is_refused_and_nothing_changes(served, tmp_path, tiny_model_dir, make_bad, message):
    llm, _, good, expected = served
    folder = make_bad(good, tmp_path, tiny_model_dir)
    for name in ("new", "good"):                      # also as a replacement of a working adapter
        with pytest.raises(ValueError, match=message):
            llm.load_adapter(name, folder)
    assert llm.metrics().adapters_resident == ["good"]
    assert llm.generate([PROMPT], GREEDY, adapter="good")[0].token_ids == expected
    with pytest.raises(ValueError, match="not loaded"):
        llm.generate([PROMPT], GREEDY, adapter="new")


def test_missing_folder_and_unknown_names(served, tmp_path):
    llm, *_ = served
    with pytest.raises(ValueError, match="no adapter folder or model-store adapter"):
        llm.load_adapter("x", tmp_path / "does-not-exist")
    with pytest.raises(ValueError, match="no adapter named"):
        llm.unload_adapter("never-loaded")
    json.dumps(llm.metrics().running_per_adapter)     # metrics stay plain data
    assert torch.is_grad_enabled()                    # loading left no global torch state behind

"""`llmchat models import FILE.gguf --dequantize` for every family the GGUF writer makes: the written folder
holds the source model's tensors under their Hugging Face names (within the quant's error), the engine on it
generates exactly what the engine generates from the GGUF itself, and transformers loads it and generates the
same greedy tokens. A bad file is one error line and leaves nothing in the library.

"Exactly" is checked on lossless (F32) files: a quantized file runs with int8 activations in the engine, so its
greedy tokens may differ from fp32 ones by near-ties; the quantized files' check is against the source weights.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from gguf_models import FAMILIES, NEW_FAMILIES, write_gguf
from llmchat.engine import LLM, SamplingParams
from llmchat.engine.store import ModelStore
from llmchat.tui.cli import main

ARCHS = FAMILIES + NEW_FAMILIES
MESSAGES = [{"role": "user", "content": "Once upon a time there was a"}]


@pytest.fixture
def library(tmp_path, monkeypatch):
    """The data dir the CLI writes to, as a store."""
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return ModelStore()


def cli_import(capsys, *args) -> dict:
    assert main(["models", "import", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def engine_greedy(folder, n=12) -> list[int]:
    llm = LLM(str(folder), dtype="float32", kv_cache_gb=0.02)
    return llm.generate([MESSAGES], SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))[0].token_ids


def transformers_greedy(folder, n=12) -> list[int]:
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         pad_token_id=tok.pad_token_id)
    return out[0, ids["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("arch", ARCHS)
def test_lossless_file_generates_as_the_gguf_does(library, capsys, tiny_gguf, arch):
    gguf = tiny_gguf(arch, "f32")
    folder = cli_import(capsys, gguf, "--dequantize")["path"]
    config = json.loads((Path(folder) / "config.json").read_text())
    assert config["dtype"] == "float32" and "quantization_config" not in config
    in_place = cli_import(capsys, gguf)                              # the engine runs the file itself
    assert in_place["quant"] == "F32" and in_place["path"] != folder
    want = engine_greedy(in_place["path"])
    assert engine_greedy(folder) == want
    assert transformers_greedy(folder) == want


@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_file_becomes_the_source_model(library, capsys, tiny_source, tiny_gguf, arch):
    seen = []
    model = library.import_path(tiny_gguf(arch, "mixed"), progress=seen.append, dequantize=True)
    assert model.supported and model.quant is None and model.dtype == "float32"
    assert seen[-1].finished and seen[-1].done_bytes == seen[-1].total_bytes
    mine = load_file(str(model.path / "model.safetensors"))
    source = load_file(str(tiny_source(arch) / "model.safetensors"))
    assert mine.keys() == source.keys()
    for name, want in source.items():   # wrong names, q/k row order or norm offsets would be far off
        err = (mine[name] - want).norm()
        assert mine[name].dtype == torch.float32 and err <= 0.1 * want.norm(), (name, float(err))
    # transformers and the engine agree on the dequantized weights
    assert transformers_greedy(model.path) == engine_greedy(model.path)


def test_a_second_import_reuses_the_folder(library, capsys, tiny_gguf):
    first = cli_import(capsys, tiny_gguf("smollm3", "q8_0"), "--dequantize")
    assert cli_import(capsys, tiny_gguf("smollm3", "q8_0"), "--dequantize") == first
    assert [m.name for m in library.list()] == [first["name"]]


def _refused(capsys, library, path, match: str) -> None:
    assert main(["models", "import", str(path), "--dequantize"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmchat: error: ") and match in err, err
    assert library.list() == [] and not any(library.registry.dir.glob("*"))   # nothing half-written


def test_bad_files_are_one_line_and_leave_nothing(library, capsys, tiny_source, tiny_gguf, tmp_path):
    library.registry.dir.mkdir(parents=True, exist_ok=True)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really")
    _refused(capsys, library, junk, "junk.gguf is damaged or cut short")
    data = tiny_gguf("granite", "q8_0").read_bytes()
    capsys.readouterr()   # building the file on first use prints transformers' progress: only the refusal counts
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    _refused(capsys, library, cut, "cut.gguf is damaged or cut short")
    # readable, but a tensor does not fit the config: found while the folder is being written
    path = write_gguf(tiny_source("granite"), tmp_path / "shape.gguf", {"ffn_up": "Q8_0"})
    capsys.readouterr()
    raw = bytearray(path.read_bytes())
    reader = GGUFReader(str(path))
    offset = int(reader.fields["granite.feed_forward_length"].parts[-1].ctypes.data - reader.data.ctypes.data)
    raw[offset:offset + 4] = np.uint32(384).tobytes()
    bad = tmp_path / "bad-shape.gguf"
    bad.write_bytes(bytes(raw))
    _refused(capsys, library, bad, "its config expects")

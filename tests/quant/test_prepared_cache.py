"""A GGUF model's prepared quantized weights come back from their cache file with the same bits as a cold load,
and a file that does not belong (another file, a changed file) or is damaged is never used."""
from __future__ import annotations

import logging
import os

import pytest
import torch

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.quant.prepared_cache import HEADER
from llmchat.engine.quant.quality import sequence_logits
from llmchat.kernels.quant import tiles_isa

MESSAGES = [{"role": "user", "content": "Once upon a time there was a"}]


def load(folder, **kw):
    return LLM(str(folder), dtype="float32", kv_cache_gb=0.02, **kw)


def run(llm):
    """Greedy tokens and the logits of every position (teacher-forced), as raw bytes: equal means bit-equal."""
    out = llm.generate([MESSAGES], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))[0]
    logits = sequence_logits(llm, out.prompt_token_ids + out.token_ids)
    return out.token_ids, logits.float().numpy().tobytes()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLMCHAT_PREPARED_CACHE", raising=False)
    return tmp_path / "cache" / "prepared"


def prepared(llm) -> bool:
    return bool(llm.engine.runner.model.__dict__.get("_weights_prepared"))


@pytest.mark.parametrize("arch, mix, mapped", [("llama", "mixed", True), ("qwen2", "q4_0", True),
                                               ("qwen3", "q8_0", True), ("llama", "mixed", False)])
def test_warm_start_has_the_cold_bits(store, tiny_gguf, cache_dir, arch, mix, mapped):
    folder = store.import_path(tiny_gguf(arch, mix)).path
    reference = run(load(folder, prepared_cache=False))
    cold = load(folder)
    assert not prepared(cold) and len(list(cache_dir.glob("*.bin"))) == 1
    assert run(cold) == reference
    warm = load(folder, prepared_mmap=mapped)
    assert prepared(warm)
    assert run(warm) == reference
    cold_model, warm_model = cold.engine.runner.model, warm.engine.runner.model
    for (name, a), (_, b) in zip(sorted(cold_model.named_modules()), sorted(warm_model.named_modules())):
        if hasattr(a, "quantized_run_calls"):
            for (s1, w1), (s2, w2) in zip(a.quantized_run_calls(), b.quantized_run_calls()):
                assert s1 == s2 and w1.layout == w2.layout, name
                assert all(torch.equal(x, y) for x, y in zip(w1.present(), w2.present())), name


def test_a_changed_gguf_file_is_not_served_from_the_old_cache(store, tiny_gguf, cache_dir, tmp_path):
    source = tmp_path / "copy.gguf"
    source.write_bytes(tiny_gguf("llama", "mixed").read_bytes())
    folder = store.import_path(source).path
    load(folder)
    first = set(cache_dir.glob("*.bin"))
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))   # the same size, touched
    (folder / "gguf.json").write_text((folder / "gguf.json").read_text())
    again = load(folder)
    assert not prepared(again)
    assert len(set(cache_dir.glob("*.bin")) - first) == 1


@pytest.mark.parametrize("damage", ["truncate", "header", "manifest"])
def test_a_damaged_cache_file_is_discarded_with_a_warning(store, tiny_gguf, cache_dir, caplog, damage):
    folder = store.import_path(tiny_gguf("qwen2", "mixed")).path
    reference = run(load(folder))
    (path,) = cache_dir.glob("*.bin")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-1000]
    elif damage == "header":
        data[:8] = b"XXXXXXXX"
    else:
        data[HEADER.size + 5] ^= 0x20   # one bit of the manifest's JSON
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        llm = load(folder)
    assert not prepared(llm)
    assert "discarded" in caplog.text
    assert run(llm) == reference
    assert prepared(load(folder))   # written afresh by that cold load


def test_a_read_only_cache_folder_only_warns(store, tiny_gguf, cache_dir, caplog):
    folder = store.import_path(tiny_gguf("llama", "q4_0")).path
    cache_dir.parent.mkdir(parents=True)
    cache_dir.write_text("not a folder")   # mkdir fails as on a read-only disk (root ignores permissions)
    with caplog.at_level(logging.WARNING):
        llm = load(folder)
    assert "not cached" in caplog.text
    assert run(llm) == run(load(folder, prepared_cache=False))


def test_switched_off_nothing_is_written(store, tiny_gguf, cache_dir, monkeypatch):
    folder = store.import_path(tiny_gguf("llama", "q4_0")).path
    monkeypatch.setenv("LLMCHAT_PREPARED_CACHE", "0")
    load(folder)
    assert not cache_dir.exists() or not list(cache_dir.glob("*.bin"))


def test_a_manifest_that_does_not_fit_the_model_leaves_it_untouched(store, tiny_gguf, cache_dir, caplog):
    """A well-formed file (its checksum right) whose manifest names a module the model has not: discarded
    before any weight is attached, and the load goes on cold."""
    import json
    import zlib

    from llmchat.engine.quant.prepared_cache import MAGIC, _aligned
    folder = store.import_path(tiny_gguf("llama", "mixed")).path
    reference = run(load(folder))
    (path,) = cache_dir.glob("*.bin")
    data = path.read_bytes()
    _, length, _ = HEADER.unpack(data[:HEADER.size])
    manifest = json.loads(data[HEADER.size:HEADER.size + length])
    first = next(iter(manifest["linears"]))
    manifest["linears"]["model.no_such_layer"] = manifest["linears"].pop(first)
    text = json.dumps(manifest).encode()
    body = data[_aligned(HEADER.size + length):]
    header = HEADER.pack(MAGIC, len(text), zlib.crc32(text)) + text
    path.write_bytes(header + bytes(_aligned(len(header)) - len(header)) + body)
    with caplog.at_level(logging.WARNING):
        llm = load(folder)
    assert not prepared(llm) and "discarded" in caplog.text
    assert run(llm) == reference


@pytest.mark.skipif(not tiles_isa().startswith("avx512"), reason="the x86 tile layout (AVX512-VNNI) runs Q6_K in 6 bits")
def test_q6_k_in_6_bits_has_the_bits_of_8_and_a_cache_file_of_its_own(store, tiny_gguf, cache_dir, monkeypatch):
    """The Q6_K tensors (output head, attn_v, ...) are held in the file's 6 bits by default here: the same tokens
    and logits, bit for bit, as their 8-bit form (LLMCHAT_Q6K_BITS=8), fewer weight bytes, and prepared files of
    their own."""
    folder = store.import_path(tiny_gguf("llama", "mixed")).path
    monkeypatch.setenv("LLMCHAT_Q6K_BITS", "8")
    eight = load(folder)
    monkeypatch.delenv("LLMCHAT_Q6K_BITS")
    six = load(folder)
    assert not prepared(six) and len(list(cache_dir.glob("*.bin"))) == 2   # not the 8-bit file
    kinds = {w.kind for m in six.engine.runner.model.modules() if hasattr(m, "quantized_run_weights")
             for w in m.quantized_run_weights()}
    assert "q6" in kinds and "q8h" not in kinds
    assert six.engine.runner.model.weight_bytes() < eight.engine.runner.model.weight_bytes()
    assert run(six) == run(eight)
    assert prepared(load(folder)) and run(load(folder)) == run(eight)   # its own warm start

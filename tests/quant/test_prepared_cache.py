"""A GGUF model's prepared quantized weights come back from their cache file with the same bits as a cold load,
and a file that does not belong (another file, a changed file) or is damaged is never used."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest
import torch

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.quant import prepared_cache
from llmchat.engine.quant.prepared_cache import HEADER, wait_for_writes
from llmchat.engine.quant.quality import sequence_logits
from llmchat.kernels.quant import tiles_isa

MESSAGES = [{"role": "user", "content": "Once upon a time there was a"}]


def load(folder, **kw):
    """An LLM once its cold load's prepared file (written in the background) is in place."""
    llm = LLM(str(folder), dtype="float32", kv_cache_gb=0.02, **kw)
    wait_for_writes()
    return llm


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


def test_a_cold_start_answers_while_its_file_is_still_being_written(store, tiny_gguf, cache_dir, monkeypatch):
    """The writer is held before its first byte: the model is loaded and answers all the same, no file (not even
    half of one) is there meanwhile, and once the writer goes on, the file gives the next start the same bits."""
    folder = store.import_path(tiny_gguf("qwen2", "mixed")).path
    reference = run(load(folder, prepared_cache=False))
    go_on, evict = threading.Event(), prepared_cache._evict

    def held_evict(*args):
        assert go_on.wait(timeout=120)
        evict(*args)
    monkeypatch.setattr(prepared_cache, "_evict", held_evict)
    cold = LLM(str(folder), dtype="float32", kv_cache_gb=0.02)
    writers = [t for t in threading.enumerate() if t.name == "llmchat-prepared-writer"]
    assert len(writers) == 1 and writers[0].is_alive()
    assert run(cold) == reference
    assert not cache_dir.exists() or not list(cache_dir.iterdir())
    go_on.set()
    wait_for_writes()
    assert len(list(cache_dir.glob("*.bin"))) == 1 and not list(cache_dir.glob("*.tmp"))
    warm = load(folder)
    assert prepared(warm) and run(warm) == reference


HELD_RUN = """
import atexit, sys, threading
from llmchat.engine.quant import prepared_cache
from llmchat.tui.cli import entry
exiting, evict = threading.Event(), prepared_cache._evict
def held_evict(*args):   # the writer starts only once the process is exiting
    assert exiting.wait(timeout=120)
    evict(*args)
prepared_cache._evict = held_evict
atexit.register(exiting.set)   # runs before the exit's wait for writers (atexit is last in, first out)
sys.argv = ["llmchat", "run", sys.argv[1], "Hello", "--max-tokens", "1"]
entry()
"""


def test_llmchat_run_leaves_the_file_for_the_next_start(store, tiny_gguf, cache_dir):
    """`llmchat run` exits right after its reply (os._exit after the atexit work): the prepared file, whose writer
    had not written a byte when the reply was done, is complete all the same."""
    gguf = tiny_gguf("llama", "q4_0")
    env = {**os.environ, "LLMCHAT_DATA_DIR": str(cache_dir.parent.parent / "data")}
    proc = subprocess.run([sys.executable, "-c", HELD_RUN, str(gguf)], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "Traceback" not in proc.stderr
    assert len(list(cache_dir.glob("*.bin"))) == 1 and not list(cache_dir.glob("*.tmp"))
    assert prepared(load(store.import_path(gguf).path))

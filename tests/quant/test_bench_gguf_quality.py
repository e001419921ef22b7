"""`llmchat bench FILE.gguf` reports its quality against the fp32 dequantized model (KL divergence, top-1
agreement) for the families transformers' GGUF reader does not know too: the reference comes from the engine's
own reader. A lossless (F32) file is its own reference, so KL ~0 and top-1 100%; a quantized one is measurably
off but close."""
from __future__ import annotations

import json

import pytest
import torch

from llmchat.tui.cli import main

ARCHS = ("granite", "smollm3", "gemma3", "phi3")


def bench_quality(capsys, gguf) -> dict:
    code = main(["bench", str(gguf), "--dtype", "float32", "--sessions", "2", "--tokens", "4", "--prefix", "40",
                 "--kv-cache-gb", "0.05", "--threads", "1", "--no-baseline", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["memory_mb"]["file"] > 0   # it ran from the GGUF file
    return report["quality"]


@pytest.mark.parametrize("arch", ARCHS)
def test_lossless_file_matches_its_reference(data_dir, capsys, tiny_gguf, arch):
    q = bench_quality(capsys, tiny_gguf(arch, "f32"))
    assert q["positions"] > 100
    assert q["kl_divergence"] < 1e-6 and q["top1_agreement"] == 1.0, q


@pytest.mark.parametrize("arch", ("granite", "gemma3"))
def test_quantized_file_is_close_to_its_reference_but_not_equal(data_dir, capsys, tiny_gguf, arch):
    q = bench_quality(capsys, tiny_gguf(arch, "q4_0"))
    assert 1e-6 < q["kl_divergence"] < 0.05 and q["top1_agreement"] >= 0.8, q


@pytest.mark.skipif(not __import__("llmchat.kernels", fromlist=["tiles_native"]).tiles_native(),
                    reason="16-bit activations are the x86 tile layout's (AVX512-VNNI); other builds keep 8")
def test_q8_0_on_tiles_computes_what_its_weights_say(data_dir, capsys, tiny_gguf, monkeypatch):
    """Q8_0 on the tile layout takes 16-bit activations: the model is its dequantized weights' model, where
    8-bit activations (LLMCHAT_Q8_WIDE=0 on the tiles, or the row layout: LLMCHAT_QUANT_TILES=0) move the
    distribution measurably."""
    gguf = tiny_gguf("granite", "q8_0")
    wide = bench_quality(capsys, gguf)
    monkeypatch.setenv("LLMCHAT_Q8_WIDE", "0")
    narrow = bench_quality(capsys, gguf)
    monkeypatch.setenv("LLMCHAT_QUANT_TILES", "0")
    rows = bench_quality(capsys, gguf)
    assert wide["kl_divergence"] < 1e-6 and wide["top1_agreement"] == 1.0, wide
    for eight_bit in (narrow, rows):
        assert eight_bit["kl_divergence"] > 100 * max(wide["kl_divergence"], 1e-9), (wide, eight_bit)


def test_quality_reference_is_sized_before_it_is_built(data_dir, tiny_gguf):
    """A model whose fp32 reference would not fit (a 7B needs ~60 GB) is benchmarked without its quality, told
    why, not killed by the kernel's OOM killer: the estimate is the reference's own tensors, twice."""
    from llmchat.engine.bench.gguf_quality import reference_bytes, reference_fits
    from llmchat.engine.model_loader import read_config
    from llmchat.engine.quant.gguf_export import dense_tensors
    from llmchat.engine.quant.gguf_tensors import open_reader
    from llmchat.tui.cli import main as cli

    gguf = tiny_gguf("granite", "q4_0")
    assert cli(["models", "import", str(gguf), "--name", "tiny-granite-q4"]) == 0
    from llmchat.engine.store import ModelStore
    state = dense_tensors(open_reader(gguf), read_config(ModelStore().resolve("tiny-granite-q4")), "granite",
                          torch.float32)
    assert reference_bytes(gguf) == 2 * sum(t.numel() * 4 for _name, t, _ in state)
    assert reference_fits(gguf, free=reference_bytes(gguf)) == (True, "")
    fits, why = reference_fits(gguf, free=reference_bytes(gguf) - 1)
    assert not fits and "fp32 reference needs" in why and "GB free" in why

"""`llmchat bench FILE.gguf` reports its quality against the fp32 dequantized model (KL divergence, top-1
agreement) for the families transformers' GGUF reader does not know too: the reference comes from the engine's
own reader. A lossless (F32) file is its own reference, so KL ~0 and top-1 100%; a quantized one is measurably
off but close."""
from __future__ import annotations

import json

import pytest

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

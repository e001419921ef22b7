"""The engine's models against transformers, fp32: prefill, chunked prefill, paged varlen decode, greedy."""
from __future__ import annotations

import pytest
import torch
from model_harness import Blocks, Seq, greedy, hf_greedy, hf_last_logits, hf_model, make_runner, prompt, step
from tiny_models import ARCHS, make_model

ATOL = 2e-4
# "kernels" must really run llmchat.kernels: make_runner asserts the backend was not downgraded.
BACKENDS = ("torch", "kernels")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_batch_matches_transformers(tiny_model_dir, arch, backend):
    folder = tiny_model_dir(arch)
    runner, hf = make_runner(folder, backend), hf_model(folder)
    blocks = Blocks(runner)
    prompts = [prompt(n, seed) for seed, n in enumerate((37, 1, 16, 5))]
    logits = step(runner, blocks, [(Seq(i, p), len(p)) for i, p in enumerate(prompts)])
    assert logits.shape == (4, runner.vocab_size) and logits.dtype == torch.float32
    for row, ids in zip(logits, prompts):
        torch.testing.assert_close(row, hf_last_logits(hf, ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_prefill_across_steps_matches(tiny_model_dir, arch, backend):
    folder = tiny_model_dir(arch)
    runner, hf = make_runner(folder, backend), hf_model(folder)
    blocks = Blocks(runner)
    long_ids, short_ids = prompt(45, 1), prompt(9, 2)
    long_seq, short_seq = Seq(0, long_ids), Seq(1, short_ids)
    step(runner, blocks, [(short_seq, 9)])
    short_seq.token_ids.append(7)
    # chunks of 10 (crossing block borders at 16) mixed with the other sequence's decodes
    for start in range(0, 45, 10):
        n = min(10, 45 - start)
        logits = step(runner, blocks, [(long_seq, n), (short_seq, 1)])
        torch.testing.assert_close(logits[0], hf_last_logits(hf, long_ids[:start + n]), atol=ATOL, rtol=0)
        torch.testing.assert_close(logits[1], hf_last_logits(hf, short_seq.token_ids), atol=ATOL, rtol=0)
        short_seq.token_ids.append(int(logits[1].argmax()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_varlen_decode_matches_generate(tiny_model_dir, arch, backend):
    """Several sequences of different lengths decode together through the paged cache for 24 steps;
    every step's logits and every token equal transformers' generate."""
    folder = tiny_model_dir(arch)
    runner, hf = make_runner(folder, backend), hf_model(folder)
    prompts = [prompt(n, 10 + n) for n in (3, 20, 33)]
    tokens, rows = greedy(runner, Blocks(runner), prompts, max_new=24, chunk=8)
    for ids, got, got_rows in zip(prompts, tokens, rows):
        want, want_rows = hf_greedy(hf, ids, 24)
        assert got == want
        for a, b in zip(got_rows, want_rows):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert len(set(map(tuple, tokens))) == 3  # the tiny models really produce different replies


def test_logits_only_for_last_token_of_each_chunk(tiny_model_dir):
    folder = tiny_model_dir("llama")
    runner, hf = make_runner(folder), hf_model(folder)
    blocks = Blocks(runner)
    a, b = prompt(20, 3), prompt(12, 4)
    seq_a, seq_b = Seq(0, a), Seq(1, b)
    logits = step(runner, blocks, [(seq_a, 7), (seq_b, 12)])  # a's chunk stops mid-prompt
    assert logits.shape[0] == 2
    torch.testing.assert_close(logits[0], hf_last_logits(hf, a[:7]), atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[1], hf_last_logits(hf, b), atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mistral_sliding_window_matches_transformers(tmp_path, backend):
    folder = make_model(tmp_path, "mistral", sliding_window=12)
    runner, hf = make_runner(folder, backend), hf_model(folder)
    assert runner.args.sliding_windows == [12, 12]
    prompts = [prompt(30, 7), prompt(9, 8)]
    tokens, rows = greedy(runner, Blocks(runner), prompts, max_new=10, chunk=8)
    for ids, got, got_rows in zip(prompts, tokens, rows):
        want, want_rows = hf_greedy(hf, ids, 10)
        assert got == want
        for a, b in zip(got_rows, want_rows):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def test_qwen3_head_dim_from_config_differs_from_hidden_over_heads(tmp_path):
    folder = make_model(tmp_path, "qwen3", head_dim=32)  # q width 4 x 32 = 128 != hidden 64
    runner, hf = make_runner(folder, "kernels"), hf_model(folder)
    assert runner.args.head_dim == 32 and runner.model.model.layers[0].self_attn.q_size == 128
    prompts = [prompt(21, 9), prompt(5, 10)]
    tokens, _ = greedy(runner, Blocks(runner), prompts, max_new=12, chunk=16)
    assert tokens == [hf_greedy(hf, ids, 12)[0] for ids in prompts]

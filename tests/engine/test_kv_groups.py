"""The engine's grouped KV cache: the config's default, the runner's cache shape, runs of consecutive blocks
per sequence, and the same greedy tokens as transformers with either layout and either attention backend."""
from __future__ import annotations

import pytest

from engine_helpers import hf_greedy, random_prompt
from llmchat.engine import LLM
from llmchat.engine.config import EngineConfig
from llmchat.engine.sampling_params import SamplingParams


@pytest.mark.parametrize("block_size,per_group", [(16, 4), (8, 8), (32, 2), (64, 1), (128, 1)])
def test_default_groups_hold_64_tokens(tmp_path, block_size, per_group):
    assert EngineConfig(tmp_path, block_size=block_size).kv_blocks_per_group == per_group


def test_groups_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="kv_blocks_per_group must be positive"):
        EngineConfig(tmp_path, kv_blocks_per_group=0)


def test_runner_cache_is_grouped_and_sequences_get_runs(tiny_model_dir):
    llm = LLM(tiny_model_dir("llama"), kv_cache_gb=0.01)
    engine = llm.engine
    cache = engine.runner.key_caches[0]
    assert cache.dim() == 5 and cache.shape[2:4] == (4, 16)      # [groups, Hkv, 4 blocks, 16 tokens, D]
    assert cache.shape[0] * 4 >= engine.block_manager.num_blocks
    params = SamplingParams(max_tokens=70, temperature=0.0, ignore_eos=True)
    # three sessions decoding side by side: their blocks are allocated interleaved, one step apart
    seqs = [engine.add_request(random_prompt(5, seed=i), params) for i in range(3)]
    tables = {}
    while engine.has_unfinished():
        engine.step()
        for seq in seqs:
            if seq.block_table:
                tables[seq.request_id] = list(seq.block_table)
    assert len(tables) == 3
    for table in tables.values():
        assert len(table) >= 4
        for i in range(1, len(table)):
            if i % 4:                                     # inside a group: the next block of the same group
                assert table[i] == table[i - 1] + 1, table
            else:                                         # a new group starts at its first block
                assert table[i] % 4 == 0, table


@pytest.mark.parametrize("backend", ["kernels", "torch"])
@pytest.mark.parametrize("per_group", [1, 4])
def test_greedy_tokens_match_transformers_with_either_layout(tiny_model_dir, backend, per_group):
    folder = tiny_model_dir("qwen2")
    llm = LLM(folder, kv_cache_gb=0.01, kv_blocks_per_group=per_group, attention_backend=backend, dtype="float32")
    prompts = [random_prompt(n, seed=10 + n) for n in (3, 40, 17)]
    outs = llm.generate(prompts, SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True))
    for prompt, out in zip(prompts, outs):
        assert out.token_ids == hf_greedy(folder, prompt, 50, ignore_eos=True)

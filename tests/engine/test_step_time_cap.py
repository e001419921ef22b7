"""The step time cap in a real engine: while a session streams, a long prompt arriving is prefilled in chunks
sized to the step target, and every session still gets transformers' greedy tokens."""
from __future__ import annotations

import pytest

from engine_helpers import hf_greedy, random_prompt
from llmchat.engine import LLM
from llmchat.engine.config import EngineConfig
from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.scheduler import MIN_PREFILL_CHUNK


def test_long_prompt_arrives_while_a_session_streams(tiny_model_dir):
    folder = tiny_model_dir("llama")
    # a target far below one token's cost: while anything decodes, prefill chunks are the floor's size
    llm = LLM(folder, kv_cache_gb=0.01, dtype="float32", step_target_s=1e-9)
    engine = llm.engine
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    streaming = engine.add_request(random_prompt(40, seed=1), params)  # 40 tokens: the first step is timed
    engine.step()
    assert engine.scheduler.seconds_per_token is not None
    long_prompt = random_prompt(150, seed=2)
    arriving = engine.add_request(long_prompt, params)
    chunk_sizes = []
    while engine.has_unfinished():
        before = arriving.num_computed_tokens
        engine.step()
        if 0 < arriving.num_computed_tokens - before and arriving.num_computed_tokens <= len(long_prompt):
            chunk_sizes.append(arriving.num_computed_tokens - before)
    assert max(chunk_sizes) == MIN_PREFILL_CHUNK and sum(chunk_sizes) == len(long_prompt)
    assert streaming.output_token_ids == hf_greedy(folder, random_prompt(40, seed=1), 40, ignore_eos=True)
    assert arriving.output_token_ids == hf_greedy(folder, long_prompt, 40, ignore_eos=True)


def test_step_target_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="step_target_s must be >= 0"):
        EngineConfig(tmp_path, step_target_s=-1.0)

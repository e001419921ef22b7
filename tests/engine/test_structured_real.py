"""The real SmolLM2-135M-Instruct under twenty JSON schemas (structured_schemas.py): every reply, greedy and
sampled, is complete JSON that validates against its schema."""
from __future__ import annotations

import json

import jsonschema
import pytest
from real_model import smollm2_folder
from structured_schemas import SCHEMAS, request_for

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.structured_outputs import StructuredOutputs


@pytest.fixture(scope="module")
def llm():
    return LLM(smollm2_folder(), kv_cache_gb=0.5)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_every_reply_validates_against_its_schema(llm, temperature):
    params = [SamplingParams(temperature=temperature, seed=i, max_tokens=400,
                             structured_outputs=StructuredOutputs(json=schema))
              for i, (_, schema) in enumerate(SCHEMAS)]
    outs = llm.generate([request_for(what, schema) for what, schema in SCHEMAS], params)
    for (what, schema), out in zip(SCHEMAS, outs):
        assert out.finish_reason == "stop", (what, out.text)
        jsonschema.validate(json.loads(out.text), schema)

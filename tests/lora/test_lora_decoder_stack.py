"""Steps with adapter tokens run inside the decoder stack (every layer in one C++ call) with the adapters'
stacks and the step's segments, and give the Python layers' replies (their LoRA hooks are the oracle)."""
from __future__ import annotations

import pytest
from lora_helpers import PROMPTS, make_adapter
from tiny_models import make_model

from llmchat.engine import LLM, SamplingParams


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["qwen2", "phi3", "gemma3"])   # phi3: adapters on its fused projections
def test_lora_steps_in_the_stack_match_the_python_layers(tmp_path, arch, dtype):
    model = make_model(tmp_path / "m", arch)
    llm = LLM(model, dtype=dtype)
    llm.load_adapter("all", make_adapter(model, tmp_path / "all", r=8, alpha=16, seed=1))
    llm.load_adapter("some", make_adapter(model, tmp_path / "some", r=4, alpha=4,
                                          targets=("q_proj", "v_proj", "down_proj"), seed=2))
    names = [None, "all", "some", "all", None, "some"]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(names))]
    greedy = SamplingParams(max_tokens=10, temperature=0.0)
    stack = llm.engine.runner.model._stack
    seen = []
    op = stack.op
    stack.op = lambda *args: (seen.append(sum(t.numel() > 0 for t in args[19])), op(*args))
    with_stack = [o.token_ids for o in llm.generate(prompts, greedy, adapter=names)]
    assert seen and max(seen) > 0          # steps with adapter tokens ran in the stack, with their stacks
    llm.engine.runner.model.__dict__["_stack"] = None
    python_layers = [o.token_ids for o in llm.generate(prompts, greedy, adapter=names)]
    assert with_stack == python_layers
    assert with_stack[1] != with_stack[0] or with_stack[3] != with_stack[4]   # the adapters change replies

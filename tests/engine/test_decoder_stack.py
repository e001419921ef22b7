"""The decoder stack (every layer in one C++ call) gives the Python layers' logits bit for bit, runs where
it applies, and steps aside where it does not (the torch backend, EngineConfig.decoder_stack off, LoRA steps)."""
from __future__ import annotations

import pytest
import torch

from llmchat.engine.models.decoder_stack import DecoderStack
from model_harness import Blocks, greedy, make_runner, prompt
from tiny_models import make_model


def counting(stack: DecoderStack) -> list:
    calls = []
    op = stack.op
    stack.op = lambda *args: (calls.append(args[0].shape[0]), op(*args))
    return calls


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("mistral", {"sliding_window": 12}),
                                            ("qwen2", {}), ("qwen3", {}), ("llama", {"tie_word_embeddings": True}),
                                            ("phi3", {}), ("granite", {}), ("smollm3", {}), ("gemma3", {}),
                                            ("gemma3", {"tie_word_embeddings": False})])
def test_stack_matches_the_python_layers_bit_for_bit(tmp_path, arch, overrides, dtype):
    folder = make_model(tmp_path / arch, arch, **overrides)
    runner = make_runner(folder, backend="kernels", dtype=dtype)
    model = runner.model
    assert model._stack is not None
    calls = counting(model._stack)
    # chunked prefills mixed with decodes, over scattered blocks; with plain (fp32) weights the steps above
    # the small-M range fall back to the Python layers, so both kinds of step occur
    prompts = [prompt(40, 1), prompt(7, 2), prompt(70, 3)]
    got_tokens, got_rows = greedy(runner, Blocks(runner, 64, seed=1), prompts, max_new=10, chunk=16)
    stack = model._stack
    model.__dict__["_stack"] = None
    want_tokens, want_rows = greedy(runner, Blocks(runner, 64, seed=1), prompts, max_new=10, chunk=16)
    model.__dict__["_stack"] = stack
    assert calls and max(calls) >= 16 and min(calls) <= 3   # prefill chunks and decode steps ran in the stack
    assert got_tokens == want_tokens
    for got, want in zip(got_rows, want_rows):
        for g, w in zip(got, want):
            assert torch.equal(g, w)


def test_stack_steps_aside_where_it_does_not_apply(tmp_path):
    llama = make_model(tmp_path / "llama", "llama")
    assert make_runner(llama, backend="torch").model._stack is None      # the reference backend
    assert make_runner(llama, backend="kernels", decoder_stack=False).model._stack is None


def test_lora_on_its_torch_path_runs_the_python_layers(tmp_path):
    runner = make_runner(make_model(tmp_path / "m", "llama"), backend="kernels")
    stack = runner.model._stack

    class Manager:
        fused_op = None

    assert stack.runs(5, None) and not stack.runs(5, Manager()) and not stack.runs(0, None)


def test_bad_arguments_are_clear_errors(tmp_path):
    runner = make_runner(make_model(tmp_path / "m", "llama"), backend="kernels", dtype="bfloat16")
    blocks = Blocks(runner, 8)
    stack = runner.model._stack
    x = torch.randn(2, 64).to(torch.bfloat16)
    good = dict(weights=stack.weights, windows=stack.windows, keys=runner.key_caches, values=runner.value_caches,
                positions=torch.tensor([0, 1]), slots=torch.tensor([0, 1]), tables=torch.zeros(1, 1, dtype=torch.int32),
                lens=torch.tensor([2], dtype=torch.int32), qsl=torch.tensor([0, 2], dtype=torch.int32))

    def call(**change):
        a = {**good, **change}
        torch.ops.llmchat.decoder_stack(x.clone(), torch.empty_like(x), a["weights"], a["windows"], a["keys"],
                                        a["values"], a["positions"], a["slots"], a["tables"], a["lens"], a["qsl"],
                                        a.get("rotary", stack.rotary), stack.num_heads, stack.head_dim,
                                        stack.intermediate, stack.eps, stack.scale, stack.residual_scale, stack.gelu,
                                        a.get("lora", []), stack.no_segments, [], [])

    call()  # the good arguments run
    assert blocks.block_size == 16
    for change, message in [
        (dict(weights=stack.weights[:-1]), "weights"),
        (dict(windows=[0] * len(stack.windows)), "sliding windows"),
        (dict(weights=[w.float() if i == 2 else w for i, w in enumerate(stack.weights)]), "qkv weight"),
        (dict(positions=torch.tensor([0, 10**6])), "positions"),
        (dict(slots=torch.tensor([0, 8 * 16])), "slot_mapping"),
        (dict(tables=torch.full((1, 1), 99, dtype=torch.int32)), "block_tables"),
        (dict(lora=[torch.empty(0)] * 3), "lora"),
        (dict(rotary=stack.rotary[:1]), "RoPE cache"),
        (dict(rotary=[torch.randn(1, 16)] * len(stack.rotary)), "positions"),
    ]:
        with pytest.raises(ValueError, match=message):
            call(**change)

"""Layer contracts others build on: the LoRA hook on every projection, bf16 weight packing."""
from __future__ import annotations


import torch
import torch.nn.functional as F
from model_harness import Blocks, Seq, hf_last_logits, hf_model, make_runner, prompt, step
from tiny_models import make_model

from llmchat.engine.layers.linear import Linear


class RecordingHook:
    """A LoRA stand-in: records every call and adds a constant to one slice of the output."""

    def __init__(self, slice_name: str, delta: float) -> None:
        self.calls, self.slice_name, self.delta = [], slice_name, delta

    def apply(self, layer, x, out):
        self.calls.append((layer.prefix, tuple(x.shape), tuple(out.shape)))
        i = layer.slice_names.index(self.slice_name)
        out[:, layer.slice_offsets[i]:layer.slice_offsets[i + 1]] += self.delta


def test_every_projection_is_one_hookable_linear(tiny_model_dir):
    runner = make_runner(tiny_model_dir("qwen3"))
    layer = runner.model.model.layers[1]
    attn, mlp = layer.self_attn, layer.mlp
    assert attn.qkv_proj.slice_names == ["q_proj", "k_proj", "v_proj"]
    assert attn.qkv_proj.slice_offsets == [0, 64, 96, 128]      # 4 heads x 16, 2 kv heads x 16
    assert mlp.gate_up_proj.slice_names == ["gate_proj", "up_proj"]
    assert [m.prefix for m in (attn.o_proj, mlp.down_proj)] == ["model.layers.1.self_attn.o_proj",
                                                                "model.layers.1.mlp.down_proj"]
    assert all(isinstance(m, Linear) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj))


def test_lora_hook_is_called_and_its_delta_reaches_the_logits(tiny_model_dir):
    folder = tiny_model_dir("llama")
    runner, hf = make_runner(folder), hf_model(folder)
    ids = prompt(20, 1)
    hook = RecordingHook("v_proj", 0.5)
    runner.model.model.layers[0].self_attn.qkv_proj.lora = hook
    hooked = step(runner, Blocks(runner), [(Seq(0, ids), 20)])[0]
    assert hook.calls == [("model.layers.0.self_attn.qkv_proj", (20, 64), (20, 128))]
    assert (hooked - hf_last_logits(hf, ids)).abs().max() > 1e-2
    runner.model.model.layers[0].self_attn.qkv_proj.lora = None
    plain = step(runner, Blocks(runner), [(Seq(1, ids), 20)])[0]
    torch.testing.assert_close(plain, hf_last_logits(hf, ids), atol=2e-4, rtol=0)


def test_large_bf16_linear_is_packed_and_equal():
    layer = Linear(512, [256, 128], bias=True, prefix="x")
    with torch.no_grad():
        layer.weight.copy_(torch.randn(384, 512))
        layer.bias.copy_(torch.randn(384))
    layer = layer.to(torch.bfloat16)
    dense_w, dense_b = layer.weight.detach().clone(), layer.bias.detach().clone()
    layer.finalize()
    x = torch.randn(5, 512).bfloat16()
    want = F.linear(x, dense_w, dense_b)
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():  # oneDNN's bf16 needs AVX-512 (or AVX-NE-CONVERT) on x86
        assert layer.packed_weight is not None and layer.weight is None
    torch.testing.assert_close(layer(x).float(), want.float(), atol=0.05, rtol=0.01)


def test_packed_bf16_model_stays_close_to_transformers(tmp_path):
    folder = make_model(tmp_path, "qwen2", hidden_size=256, intermediate_size=512, tie_word_embeddings=True)
    runner, hf = make_runner(folder, "kernels", "bfloat16"), hf_model(folder)
    linears = [m for m in runner.model.modules() if isinstance(m, Linear)]
    assert len(linears) == 4 * 2 + 1  # qkv, o, gate_up, down of 2 layers, and the tied lm_head
    if runner.kernels.packed_native():  # bf16 panels are the one copy: no oneDNN copy, no dense weight
        assert all(m.small_m_weight.dim() == 3 and m.packed_weight is None for m in linears)
        assert all(m.weight is None for m in linears if m is not runner.model.lm_head)
    elif torch.ops.mkldnn._is_mkldnn_bf16_supported():  # oneDNN's bf16 needs AVX-512 (or AVX-NE-CONVERT)
        assert all(m.packed_weight is not None for m in linears)
    assert runner.model.lm_head.weight is runner.model.model.embed_tokens.weight
    ids = prompt(33, 4)
    got = step(runner, Blocks(runner), [(Seq(0, ids), 33)])[0]     # 33 tokens: above the decode sizes
    want = hf_last_logits(hf, ids)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    assert int(got.argmax()) == int(want.argmax())


def test_panel_rows_read_back_every_row_of_a_packed_weight():
    import llmchat.kernels as K

    for n, k in ((40, 64), (33, 70), (16, 576)):           # partial last panel, odd pair count padding
        w = torch.randn(n, k).bfloat16()
        ids = torch.tensor([0, n - 1, 17 % n, 5, 5, n // 2])
        assert torch.equal(K.packed_rows(K.pack_linear_weight(w), ids, k), w[ids])


def test_tied_bf16_model_keeps_one_copy_of_the_embedding(tmp_path):
    folder = make_model(tmp_path, "llama", hidden_size=256, intermediate_size=512, tie_word_embeddings=True)
    runner = make_runner(folder, "kernels", "bfloat16")
    model = runner.model
    if runner.kernels.packed_native():
        assert model.lm_head.weight is None and model.model.embed_tokens.weight is None   # panels only
    ids = prompt(20, 5)
    dense = hf_model(folder).model.embed_tokens.weight.detach().bfloat16()
    assert torch.equal(model._embed(torch.tensor(ids)), dense[torch.tensor(ids)])

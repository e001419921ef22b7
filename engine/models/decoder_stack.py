"""Every decoder layer in one C++ call (kernels' decoder_stack), when the model allows it.

The op runs the same core kernels in the same order on the same buffers as DecoderLayer.forward, so its
output is bit for bit the Python path's; it saves the Python round trip and the input checks of each op of
each layer (~120 op calls per decode step for a 30-layer model). The Python layers stay the oracle and
the path for what the op does not cover: the torch backends, LoRA on its torch path (EngineConfig.lora_fused
off), and, for weights without bf16 panels, steps larger than the small-M linear takes. A step with LoRA tokens
passes every projection's adapter stack (as published at that moment) and the step's token segments.
EngineConfig.decoder_stack=False turns it off (A/B benchmarks; the model does not build it then).
"""
from __future__ import annotations

import sys

import torch

from ..attention import AttentionMetadata, KernelAttention


def python_only_reason(args) -> str | None:
    """Why the op cannot run this model's layers, which then run in Python; None when it can (docs/kernels.md)."""
    if args.gemma:
        return "Gemma 3's four (1 + w) norms per layer and its GeGLU MLP are not in the op"
    if args.activation != "silu":
        return f"the op's MLP is SwiGLU, not {args.activation}"
    if args.residual_scale != 1.0:
        return "Granite's residual multiplier is not in the op"
    if len(set(args.rope_layers)) != 1 or None in args.rope_layers:
        return "the op applies one RoPE to every layer: no NoPE layers (SmolLM3)"
    return None


def _projections(layer) -> tuple:
    """A decoder layer's projections in the op's order: qkv, o, gate_up, down."""
    return layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj


class DecoderStack:
    def __init__(self, model, layers) -> None:
        args = model.args
        self.weights: list[torch.Tensor] = []
        self.windows: list[int] = []
        first = layers[0].self_attn
        no_bias = torch.empty(0, dtype=layers[0].input_layernorm.weight.dtype)
        limits = []
        self.projections = []   # in the op's order: per layer qkv, o, gate_up, down (their LoRA hooks)
        self.quant, self.quant_runs = [], []   # quantized projections: 5 tensors per run, runs per projection
        for layer in layers:
            attn, projections = layer.self_attn, _projections(layer)
            self.projections += projections
            self.weights += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
            self.weights += [no_bias if p.is_quantized else p.small_m_weight for p in projections]
            self.weights += [p.bias if p.bias is not None else no_bias for p in projections]
            self.weights += [attn.q_norm.weight, attn.k_norm.weight] if attn.qk_norm else [no_bias, no_bias]
            self.windows.append(attn.attn.window)
            for p in projections:
                calls = p.__dict__.get("_quant_calls", [])
                self.quant_runs.append(len(calls))
                for start, _n, _w, _bias, (values, high, scales, mins, kind, offset) in calls:
                    self.quant += [values, high, scales, mins, torch.tensor([start, kind, offset], dtype=torch.int64)]
            limits += [sys.maxsize if p.is_quantized else p._small_max for p in projections]
        if not self.quant:
            self.quant_runs = []
        # bf16 panels and quantized blocks: every step size; plain weights: the small-M range
        self.max_tokens = min(limits)
        self.rotary = first.rotary_cache
        self.num_heads, self.head_dim, self.intermediate = args.num_heads, args.head_dim, args.intermediate_size
        self.eps, self.scale = float(layers[0].input_layernorm.eps), float(first.attn.scale)
        self.op = torch.ops.llmchat.decoder_stack.default
        self.no_lora = [torch.empty(0)] * 5
        self.no_segments = torch.empty(0, 3, dtype=torch.int32)

    @staticmethod
    def build(model, layers, kernels) -> DecoderStack | None:
        """The stack for this model, or None where the Python layers must run."""
        if kernels is None or python_only_reason(model.args) is not None:
            return None
        for layer in layers:
            projections = _projections(layer)
            if not isinstance(layer.self_attn.attn, KernelAttention):
                return None
            dense = [p for p in projections if not p.is_quantized]
            if any(p.small_m_weight is None or p._small_max < 1 for p in dense):
                return None
            if len({p.small_m_weight.dim() for p in dense}) > 1:
                return None
        norms = [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm,
                                                 getattr(layer.self_attn, "q_norm", None),
                                                 getattr(layer.self_attn, "k_norm", None)) if n is not None]
        if len({n.eps for n in norms}) != 1:
            return None
        return DecoderStack(model, layers)

    def runs(self, num_tokens: int, lora) -> bool:
        """lora: the LoRA manager when some token of this step uses an adapter, else None."""
        return 0 < num_tokens <= self.max_tokens and (lora is None or lora.fused_op is not None)

    def __call__(self, x: torch.Tensor, md: AttentionMetadata, kv_caches: list,
                 lora=None) -> tuple[torch.Tensor, torch.Tensor]:
        """x: the embeddings [T, hidden] (overwritten) -> (last layer's output, residual stream)."""
        residual = torch.empty_like(x)
        adapters, segments = self._lora(lora) if lora is not None else ([], self.no_segments)
        self.op(x, residual, self.weights, self.windows, [k for k, _ in kv_caches], [v for _, v in kv_caches],
                md.positions, md.slot_mapping, md.block_tables, md.seq_lens, md.query_start_loc, self.rotary,
                self.num_heads, self.head_dim, self.intermediate, self.eps, self.scale, adapters, segments,
                self.quant, self.quant_runs)
        return x, residual

    def _lora(self, manager) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per projection (a, packed b, rank offsets, slice offsets, slice ranks) of its adapter stack as
        published now (SiteStack.fused_tensors, what LoraSite.apply uses too), or empties where it has none."""
        tensors = []
        for projection in self.projections:
            fused = projection.lora.stack.fused_tensors() if projection.lora is not None else None
            tensors += fused if fused is not None else self.no_lora
        return tensors, manager.segment_tensor

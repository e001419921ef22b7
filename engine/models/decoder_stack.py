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


OP_ACTIVATIONS = ("silu", "gelu_tanh")


def python_only_reason(args) -> str | None:
    """Why the op cannot run this model's layers, which then run in Python; None when it can (docs/kernels.md).
    Every family of models/args.py runs in the op today; this is where a new one says what it lacks."""
    if args.activation not in OP_ACTIVATIONS:
        return f"the op's MLP gate is SiLU or GELU (tanh), not {args.activation}"
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
        no_rope = torch.empty(0, dtype=torch.float32)
        limits = []
        self.rotary: list[torch.Tensor] = []   # per layer its RoPE cache (shared), empty for a NoPE layer
        self.projections = []   # in the op's order: per layer qkv, o, gate_up, down (their LoRA hooks)
        self.quant, self.quant_runs = [], []   # quantized projections: 5 tensors per run, runs per projection
        for layer in layers:
            attn, projections = layer.self_attn, _projections(layer)
            self.projections += projections
            norm_in, norm_mlp, norm_attn_out, norm_mlp_out = layer.stack_norms()
            self.weights += [norm_in._w, norm_mlp._w]   # _w: what the norm multiplies by (Gemma: 1 + w)
            self.weights += [no_bias if p.is_quantized else p.small_m_weight for p in projections]
            self.weights += [p.bias if p.bias is not None else no_bias for p in projections]
            self.weights += [attn.q_norm._w, attn.k_norm._w] if attn.qk_norm else [no_bias, no_bias]
            self.weights += [norm_attn_out._w, norm_mlp_out._w] if norm_attn_out is not None else [no_bias, no_bias]
            self.windows.append(attn.attn.window)
            self.rotary.append(attn.rotary_cache if attn.rotary_cache is not None else no_rope)
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
        self.num_heads, self.head_dim, self.intermediate = args.num_heads, args.head_dim, args.intermediate_size
        self.eps, self.scale = float(layers[0].input_layernorm.eps), float(first.attn.scale)
        self.residual_scale = float(args.residual_scale)
        self.gelu = args.activation == "gelu_tanh"
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
        norms = [n for layer in layers for n in (*layer.stack_norms(), getattr(layer.self_attn, "q_norm", None),
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
                self.num_heads, self.head_dim, self.intermediate, self.eps, self.scale, self.residual_scale,
                self.gelu, adapters, segments,
                self.quant, self.quant_runs, *self._window_paging(md))
        return x, residual

    @staticmethod
    def _window_paging(md: AttentionMetadata) -> tuple:
        """The window layers' (slot_mapping, block_tables) when they have a pool of their own, else none."""
        return () if md.window is None else (md.window.slot_mapping, md.window.block_tables)

    def _lora(self, manager) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per projection (a, packed b, rank offsets, slice offsets, slice ranks) of its adapter stack as
        published now (SiteStack.fused_tensors, what LoraSite.apply uses too), or empties where it has none."""
        tensors = []
        for projection in self.projections:
            fused = projection.lora.stack.fused_tensors() if projection.lora is not None else None
            tensors += fused if fused is not None else self.no_lora
        return tensors, manager.segment_tensor

"""The decoder layer every family shares: fused-qkv paged attention, fused gate_up MLP, pre/post norms.

Gemma 3 (models/gemma3.py) builds its own layer from the same Attention and MLP."""
from __future__ import annotations

import torch
from torch import nn

from ..attention import AttentionMetadata, make_attention
from ..layers.linear import Linear
from ..layers.norm import GemmaRMSNorm, RMSNorm
from .args import ModelArgs


def norm_class(args: ModelArgs):
    """Gemma's norms scale by (1 + w); everyone else's by w."""
    return GemmaRMSNorm if args.gemma else RMSNorm


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, ops, kernels) -> None:
        super().__init__()
        d, hq, hkv = args.head_dim, args.num_heads, args.num_kv_heads
        self.head_dim, self.q_size, self.kv_size = d, hq * d, hkv * d
        prefix = f"model.layers.{layer}.self_attn"
        self.qkv_proj = Linear(args.hidden_size, [self.q_size, self.kv_size, self.kv_size], bias=args.qkv_bias,
                               slice_names=["q_proj", "k_proj", "v_proj"], prefix=f"{prefix}.qkv_proj")
        self.o_proj = Linear(self.q_size, [args.hidden_size], bias=args.o_bias, prefix=f"{prefix}.o_proj")
        if args.qk_norm:
            self.q_norm = norm_class(args)(d, args.rms_norm_eps, ops)
            self.k_norm = norm_class(args)(d, args.rms_norm_eps, ops)
        self.qk_norm = args.qk_norm
        self.ops = ops
        self.attn = make_attention(kernels, args.attention_scale, args.sliding_windows[layer])
        # fp32 cos/sin cache shared by the layers with the same RoPE, set by the model; None: a NoPE layer
        self.rotary_cache: torch.Tensor | None = None

    def bind(self) -> None:
        fast = {"_qkv": self.qkv_proj.forward, "_o": self.o_proj.forward, "_split": [self.q_size, self.kv_size,
                self.kv_size]}
        if self.qk_norm:
            fast.update(_qn=self.q_norm.forward, _kn=self.k_norm.forward)
        self.__dict__.update(fast)

    def forward(self, x: torch.Tensor, md: AttentionMetadata, kv: tuple[torch.Tensor, torch.Tensor]):
        t, d = x.shape[0], self.head_dim
        q, k, v = self._qkv(x).split(self._split, dim=-1)
        if self.qk_norm:
            q = self._qn(q.reshape(-1, d)).view(t, self.q_size)
            k = self._kn(k.reshape(-1, d)).view(t, self.kv_size)
        elif not self.ops.strided_rows:
            q, k = q.contiguous(), k.contiguous()
        if self.rotary_cache is not None:
            self.ops.rotary_embedding(md.positions, q, k, self.rotary_cache, d)
        key_cache, value_cache = kv
        if not self.ops.strided_rows:
            v = v.contiguous()
        paged = md.for_window(self.attn.window)
        self.attn.write_kv(k.view(t, -1, d), v.view(t, -1, d), key_cache, value_cache, paged)
        out = self.attn.forward(q.view(t, -1, d), key_cache, value_cache, paged)
        return self._o(out.reshape(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, ops) -> None:
        super().__init__()
        i = args.intermediate_size
        prefix = f"model.layers.{layer}.mlp"
        self.gate_up_proj = Linear(args.hidden_size, [i, i], bias=args.mlp_bias,
                                   slice_names=["gate_proj", "up_proj"], prefix=f"{prefix}.gate_up_proj")
        self.down_proj = Linear(i, [args.hidden_size], bias=args.mlp_bias, prefix=f"{prefix}.down_proj")
        self.ops = ops
        self.activation = args.activation

    def bind(self) -> None:
        act = self.ops.silu_and_mul if self.activation == "silu" else self.ops.gelu_tanh_and_mul
        self.__dict__.update(_gate_up=self.gate_up_proj.forward, _down=self.down_proj.forward, _act_mul=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._down(self._act_mul(self._gate_up(x)))


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, ops, kernels) -> None:
        super().__init__()
        self.self_attn = Attention(args, layer, ops, kernels)
        self.mlp = MLP(args, layer, ops)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, ops)
        # Granite scales each block's output before the residual add; None where the scale is 1
        self.residual_scale = args.residual_scale if args.residual_scale != 1.0 else None

    def stack_norms(self) -> tuple:
        """The norms in the decoder stack's order: input, before the MLP, on the attention output, on the MLP
        output (None: this layer has no output norms)."""
        return self.input_layernorm, self.post_attention_layernorm, None, None

    def bind(self) -> None:
        self.__dict__.update(_attn=self.self_attn.forward, _mlp=self.mlp.forward,
                             _norm_in=self.input_layernorm.forward, _add_norm_in=self.input_layernorm.add_and_norm,
                             _add_norm_post=self.post_attention_layernorm.add_and_norm)

    def forward(self, x, residual, md, kv):
        if residual is None:
            residual, x = x, self._norm_in(x)
        else:
            x, residual = self._add_norm_in(x, residual)
        x = self._attn(x, md, kv)
        if self.residual_scale is not None:
            x = x.mul_(self.residual_scale)
        x, residual = self._add_norm_post(x, residual)
        x = self._mlp(x)
        return (x.mul_(self.residual_scale) if self.residual_scale is not None else x), residual

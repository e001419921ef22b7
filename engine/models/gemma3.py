"""Gemma 3's decoder layer: the shared attention (per-head q/k norms, local or global RoPE, sliding window) and
MLP (GeGLU), wrapped in four (1 + w) norms: input, post-attention, pre-feedforward, post-feedforward.

transformers: x = x + post_attn(attn(input(x))); x = x + post_ff(mlp(pre_ff(x))). Here the residual add is
fused with the next norm, as in the Llama layer: the layer returns post_ff(mlp(...)) and the next layer (or
the final norm) adds it to the residual stream.
"""
from __future__ import annotations

from torch import nn

from ..layers.norm import GemmaRMSNorm
from .args import ModelArgs
from .decoder_layer import MLP, Attention


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, ops, kernels) -> None:
        super().__init__()
        self.self_attn = Attention(args, layer, ops, kernels)
        self.mlp = MLP(args, layer, ops)
        size, eps = args.hidden_size, args.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(size, eps, ops)
        self.post_attention_layernorm = GemmaRMSNorm(size, eps, ops)
        self.pre_feedforward_layernorm = GemmaRMSNorm(size, eps, ops)
        self.post_feedforward_layernorm = GemmaRMSNorm(size, eps, ops)

    def stack_norms(self) -> tuple:
        """The norms in the decoder stack's order (see DecoderLayer.stack_norms)."""
        return (self.input_layernorm, self.pre_feedforward_layernorm, self.post_attention_layernorm,
                self.post_feedforward_layernorm)

    def bind(self) -> None:
        self.__dict__.update(_attn=self.self_attn.forward, _mlp=self.mlp.forward,
                             _norm_in=self.input_layernorm.forward, _add_norm_in=self.input_layernorm.add_and_norm,
                             _norm_post_attn=self.post_attention_layernorm.forward,
                             _add_norm_pre_ff=self.pre_feedforward_layernorm.add_and_norm,
                             _norm_post_ff=self.post_feedforward_layernorm.forward)

    def forward(self, x, residual, md, kv):
        if residual is None:
            residual, x = x, self._norm_in(x)
        else:
            x, residual = self._add_norm_in(x, residual)
        x = self._norm_post_attn(self._attn(x, md, kv))
        x, residual = self._add_norm_pre_ff(x, residual)
        return self._norm_post_ff(self._mlp(x)), residual

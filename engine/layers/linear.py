"""Every projection of the model (qkv, o, gate_up, down) is this one class, so LoRA has one place to hook.

A `Linear` may be *fused*: its weight is the row-wise concatenation of several checkpoint projections
(`slice_names`, `output_sizes`), e.g. qkv_proj = [q_proj; k_proj; v_proj], gate_up_proj = [gate; up].

LoRA hook (no LoRA logic lives here): set `layer.lora` to any object with
    lora.apply(layer: Linear, x: Tensor [T, in], out: Tensor [T, sum(output_sizes)]) -> None
which adds the per-token adapter deltas into `out` in place, slice by slice (`layer.slice_offsets`).
Which adapter each token uses is per-step state the LoRA manager keeps itself; the model runner hands it
over before each forward (see ModelRunner.lora_manager).

bf16 weights are pre-packed for oneDNN after loading (`pack()`): torch's plain bf16 GEMV reads the weight
2-4x slower than the packed path, and decode is bound by exactly that read. A packed layer has
`weight = None` and keeps `packed_weight` (an opaque oneDNN tensor); its shape facts stay on the layer.

With the kernels backend (`finalize(kernels=...)`), steps of at most `small_m_max` tokens (decode) run
`kernels.linear_small_m`, which streams the weight at memory bandwidth; larger steps (prefill) keep the GEMM
path above, which stays the oracle. Deterministic (`finalize(deterministic=True)`, the engine's default): every
step size runs linear_small_m, whose output rows each take one fixed sequence of operations set by K alone
(threads split the weight rows, never K), so a token's projection is the same bits in a decode step, a batch
or a prefill chunk; the library GEMM blocks K by M and thread count and gives no such promise. Where bf16 weights
pack into 16-row panels (`kernels.packed_native()`: AVX512-BF16, ARM with bf16), the panels run every step size
and are the only copy of the weight kept (a tied lm_head keeps the shared dense tensor).

Quantized weights (GGUF files, `--quantize`): each fused slice is a `QuantWeight` set with `set_quantized`;
`weight` is then None and every step size runs `kernels.quant_linear` (integer block dots), consecutive
slices of one kind as one call. Without the kernels (the torch backend) the op's torch reference runs.
"""
from __future__ import annotations

import logging
import sys

import torch
import torch.nn.functional as F
from torch import nn

from llmchat.kernels.quant import QuantWeight, reference_linear

from ..config import DEFAULT_SMALL_M_MAX

log = logging.getLogger(__name__)
PACK_MIN_ELEMENTS = 1 << 16   # below this oneDNN's fixed call cost outweighs the faster weight read
try:
    _linear_packed = torch.ops.mkldnn._linear_pointwise.default
except (AttributeError, RuntimeError):  # a torch build without oneDNN: plain F.linear only
    _linear_packed = None


class Linear(nn.Module):
    def __init__(self, in_features: int, output_sizes: list[int], *, bias: bool = False,
                 slice_names: list[str] | None = None, prefix: str = "") -> None:
        super().__init__()
        self.in_features = in_features
        self.output_sizes = list(output_sizes)
        self.out_features = sum(output_sizes)
        self.slice_names = list(slice_names or [prefix.rsplit(".", 1)[-1]])
        offsets = [0]
        for size in self.output_sizes:
            offsets.append(offsets[-1] + size)
        self.slice_offsets = offsets          # slice i = out[:, offsets[i]:offsets[i+1]]
        self.prefix = prefix                  # engine-side name, e.g. "layers.3.self_attn.qkv_proj"
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(self.out_features), requires_grad=False) if bias else None
        self.lora = None                      # LoRA hook object, or None for the base model
        self.packed_weight: torch.Tensor | None = None
        self.small_m_weight: torch.Tensor | None = None   # what kernels.linear_small_m streams
        self.quantized: dict[int, QuantWeight] = {}         # slice index -> its quantized weight
        self.finalize()

    def set_quantized(self, index: int | None, weight: QuantWeight) -> None:
        """Slice `index` (None: the whole, unfused weight) runs on this quantized weight; once every slice has
        one, the dense weight is dropped (finalize)."""
        index = index or 0
        size = self.output_sizes[index]
        if (weight.n, weight.k) != (size, self.in_features):
            raise ValueError(f"{self.prefix}: quantized weight is [{weight.n}, {weight.k}], expected "
                             f"[{size}, {self.in_features}]")
        self.quantized[index] = weight

    @property
    def is_quantized(self) -> bool:
        return bool(self.quantized)

    def quantized_runs(self) -> list[tuple[int, QuantWeight]]:
        """(first output column, weight) with consecutive slices of one kind joined: one op call each."""
        runs: list[tuple[int, list[QuantWeight]]] = []
        for i in range(len(self.output_sizes)):
            w = self.quantized[i]
            last = runs[-1][1][-1] if runs else None
            if last is not None and last.layout == w.layout:
                runs[-1][1].append(w)
            else:
                runs.append((self.slice_offsets[i], [w]))
        return [(start, ws[0] if len(ws) == 1 else QuantWeight.cat(ws)) for start, ws in runs]

    def finalize(self, keep_dense: bool = False, kernels=None, deterministic: bool = False,
                 small_m_max: int = DEFAULT_SMALL_M_MAX, pack_bf16: bool = True) -> None:
        """After loading: pack if worthwhile, then keep plain references for forward (nn.Module's
        __getattr__ for parameters costs microseconds per access on the hot path). Call again after
        replacing the weights. kernels: the llmchat.kernels module to run small steps with, or None.
        deterministic: the small-M kernel runs every step size (rows independent of M, see the module doc).
        small_m_max, pack_bf16: EngineConfig's switches (0 / False: the library GEMM, plain weights)."""
        self.small_m_weight = None
        if self.quantized:
            self._finalize_quantized(kernels)
            return
        if kernels is not None and self.weight is not None and small_m_max > 0:
            self.small_m_weight = self._small_m_weight(kernels, self.weight)
        # bf16 panels run every step size about as fast as oneDNN (0.9-1.08x from M=64 to 1024, measured), so
        # they are the only copy kept: no second, oneDNN-packed copy of the weight, no OpenMP pool in the step.
        panels_only = self.small_m_weight is not None and self.small_m_weight.dim() == 3
        every_m = panels_only or (deterministic and self.small_m_weight is not None)
        if panels_only:
            if not keep_dense:
                del self.weight
                self.register_parameter("weight", None)
        elif self.weight is not None and self.weight.device.type == "cpu" and not every_m and pack_bf16:
            self.pack(keep_dense)   # (with every_m the dense weight is what the small-M kernel reads)
        small_max = sys.maxsize if every_m else small_m_max
        self.__dict__["_small_max"] = small_max if self.small_m_weight is not None else -1
        self.__dict__["_small_op"] = torch.ops.llmchat.linear_small_m if self.small_m_weight is not None else None
        self.__dict__["_w"] = self.packed_weight if self.packed_weight is not None else self.weight
        self.__dict__["_b"] = self.bias
        self.__dict__["_is_packed"] = self.packed_weight is not None

    def _finalize_quantized(self, kernels) -> None:
        if len(self.quantized) != len(self.output_sizes):
            missing = [self.slice_names[i] for i in range(len(self.output_sizes)) if i not in self.quantized]
            raise ValueError(f"{self.prefix}: {', '.join(missing)} not quantized while the rest is")
        if "weight" in self._parameters:
            del self.weight
            self.register_parameter("weight", None)
        self.__dict__["_quant_op"] = torch.ops.llmchat.quant_linear if kernels is not None else None
        self._set_runs(self.__dict__.pop("_prepared_runs", None) or self.quantized_runs())

    def attach_prepared_runs(self, runs: list[tuple[int, QuantWeight]]) -> None:
        """Runs as a cold load left them (engine/quant/prepared_cache.py): finalize takes them as they are."""
        self.__dict__["_prepared_runs"] = runs
        for i, size in enumerate(self.output_sizes):
            for start, w in runs:
                if start <= self.slice_offsets[i] < start + w.n:
                    self.quantized[i] = w

    def _set_runs(self, runs: list[tuple[int, QuantWeight]]) -> None:
        """The op calls of these runs; `quantized` becomes per-slice views of them (no second copy)."""
        self.quantized = {}
        for i, size in enumerate(self.output_sizes):
            for start, w in runs:
                if start <= self.slice_offsets[i] < start + w.n:
                    lo = self.slice_offsets[i] - start
                    self.quantized[i] = w if (lo, size) == (0, w.n) else w.rows(slice(lo, lo + size))
        bias = self.bias
        calls = []
        for start, w in runs:
            b = None if bias is None else bias.detach()[start:start + w.n].contiguous()
            calls.append((start, w.n, w, b, (*w.tensors(), w.code, w.min_offset)))
        self.__dict__.update(_quant_calls=calls, _small_max=-1, _small_op=None, _w=None, _b=bias, _is_packed=False)

    def quantized_run_weights(self) -> list[QuantWeight]:
        return [w for _, _, w, _, _ in self.__dict__.get("_quant_calls", [])]

    def quantized_run_calls(self) -> list[tuple[int, QuantWeight]]:
        """(first output column, weight) of each op call."""
        return [(start, w) for start, _, w, _, _ in self.__dict__.get("_quant_calls", [])]

    def run_tileable(self, index: int) -> bool:
        """Whether run `index` may take the tile layout: 16-row groups, and every slice of it starts on one
        (slices of a tiled run stay views)."""
        start, n, w, _, _ = self._quant_calls[index]
        inner = [off - start for off in self.slice_offsets if start <= off < start + n]
        return w.tileable() and all(off % 16 == 0 for off in inner)

    def replace_run_weights(self, weights: list[QuantWeight]) -> None:
        """The same runs on moved copies of their weights (e.g. into huge pages)."""
        starts = [start for start, _, _, _, _ in self._quant_calls]
        self._set_runs(list(zip(starts, weights)))

    def _forward_quantized(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if flat.stride(-1) != 1:
            flat = flat.contiguous()
        out = flat.new_empty(flat.shape[0], self.out_features)
        op = self._quant_op
        for start, n, w, bias, (values, high, scales, mins, kind, offset) in self._quant_calls:
            dest = out[:, start:start + n]
            if op is not None:
                op(flat, values, high, scales, mins, kind, offset, bias, dest)
            else:
                dest.copy_(reference_linear(flat, w, bias))
        return out.view(*x.shape[:-1], self.out_features)

    def finalize_dense_dropped(self) -> None:
        """After the owner deleted a kept dense weight (tied embeddings moved onto the panels): the panels
        must now serve every step size."""
        assert self.weight is None and self.small_m_weight is not None and self.small_m_weight.dim() == 3
        self.__dict__["_w"] = None

    @staticmethod
    def _small_m_weight(kernels, w: torch.Tensor) -> torch.Tensor | None:
        if w.device.type != "cpu" or w.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return None
        if w.dtype == torch.bfloat16 and kernels.packed_native():
            return kernels.pack_linear_weight(w)
        return w.detach().contiguous()

    def pack(self, keep_dense: bool = False) -> bool:
        """Pre-pack a bf16 weight for oneDNN when that path exists here and gives F.linear's result.
        keep_dense keeps `weight` too (a tied lm_head shares it with the embedding)."""
        w = self.weight
        if (_linear_packed is None or w is None or w.dtype != torch.bfloat16
                or w.numel() < PACK_MIN_ELEMENTS or not torch.backends.mkldnn.is_available()):
            return False
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
            probe = torch.randn(2, self.in_features, generator=torch.Generator().manual_seed(0)).to(w.dtype)
            got = _linear_packed(probe, packed, self.bias, "none", [], "")
            want = F.linear(probe, w, self.bias)
            if not torch.allclose(got.float(), want.float(), atol=1e-2, rtol=1e-2):
                return False
        except (RuntimeError, AttributeError) as exc:  # no oneDNN bf16 on this CPU / build
            log.debug("bf16 weight packing unavailable: %s", exc)
            return False
        self.packed_weight = packed
        if not keep_dense:
            del self.weight
            self.register_parameter("weight", None)
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "_quant_calls" in self.__dict__:
            out = self._forward_quantized(x)
        elif x.shape[0] <= self._small_max and x.dim() == 2:
            out = x.new_empty(x.shape[0], self.out_features)
            self._small_op(x, self.small_m_weight, self._b, out)
        elif self._w is None:    # panels are the only copy: flatten leading dims for the kernel
            flat = x.reshape(-1, x.shape[-1])
            out = flat.new_empty(flat.shape[0], self.out_features)
            self._small_op(flat, self.small_m_weight, self._b, out)
            out = out.view(*x.shape[:-1], self.out_features)
        elif self._is_packed:
            out = _linear_packed(x, self._w, self._b, "none", [], "")
        else:
            out = F.linear(x, self._w, self._b)
        if self.lora is not None:
            self.lora.apply(self, x, out)
        return out

    def extra_repr(self) -> str:
        quant = f", quantized={sorted({w.source for w in self.quantized.values()})}" if self.quantized else ""
        return f"in={self.in_features}, out={self.output_sizes}, bias={self.bias is not None}{quant}"

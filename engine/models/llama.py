"""Llama / Mistral / Qwen2 / Qwen3 / Granite / Phi-3 / SmolLM3 as the engine's own modules: fused qkv and gate_up,
paged attention (models/decoder_layer.py). Gemma 3 reuses them with its own decoder layer and norms (models/gemma3.py).

Per-family differences come from ModelArgs (models/args.py): attention scale, NoPE layers, multipliers. Module
names mirror the checkpoints (model.layers.N.self_attn...), so weight loading only needs the stacking table below.

Hot path: after loading, `bind()` stores plain references to the submodules' forward methods in each
module's __dict__ (`_qkv`, `_mlp`, ...). Calling those skips nn.Module.__call__ and __getattr__, which
otherwise cost a few milliseconds per decode step over 30 layers. No forward hooks are used anywhere.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from llmchat.kernels.memory import huge_page_slots, pack_into_huge_pages, return_freed_memory
from llmchat.kernels.quant import QuantWeight

from ..attention import AttentionMetadata
from ..config import DEFAULT_SMALL_M_MAX
from ..layers.linear import Linear
from ..layers.norm import RMSNorm
from ..layers.rotary import cos_sin_cache
from .args import ModelArgs
from .decoder_layer import DecoderLayer, norm_class
from .decoder_stack import DecoderStack
from .gemma3 import Gemma3DecoderLayer

class DecoderModel(nn.Module):
    def __init__(self, args: ModelArgs, ops, kernels) -> None:
        super().__init__()
        # an empty weight (the loader fills it): a default-initialized one would run normal_, which on the meta
        # device goes through torch._refs and imports torch._dynamo and sympy (~45 MB resident)
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size,
                                         _weight=torch.empty(args.vocab_size, args.hidden_size), _freeze=True)
        layer_class = Gemma3DecoderLayer if args.gemma else DecoderLayer
        self.layers = nn.ModuleList(layer_class(args, i, ops, kernels) for i in range(args.num_layers))
        self.norm = norm_class(args)(args.hidden_size, args.rms_norm_eps, ops)


class CausalLM(nn.Module):
    """forward(input_ids, md, kv_caches, logits_rows) -> fp32 logits of the selected rows only.

    The decoder layers run in one C++ call (models/decoder_stack.py) where the model allows it."""

    def __init__(self, args: ModelArgs, ops, kernels) -> None:
        super().__init__()
        self.args = args
        self.model = DecoderModel(args, ops, kernels)
        self.lm_head = Linear(args.hidden_size, [args.vocab_size], prefix="lm_head")
        self.__dict__["_kernels"] = kernels   # decode-size linears run kernels.linear_small_m (layers/linear.py)
        self.__dict__["quantized_embedding"] = None   # a QuantWeight token table (GGUF), read row by row

    def set_quantized_embedding(self, weight) -> None:
        """The token table stays quantized: lookups dequantize their rows; a tied lm_head runs on it."""
        if (weight.n, weight.k) != (self.args.vocab_size, self.args.hidden_size):
            raise ValueError(f"token table is [{weight.n}, {weight.k}], expected "
                             f"[{self.args.vocab_size}, {self.args.hidden_size}]")
        self.__dict__["quantized_embedding"] = weight
        del self.model.embed_tokens.weight
        self.model.embed_tokens.register_parameter("weight", None)

    def weight_bytes(self) -> int:
        """Bytes the weights take in memory: dense tensors, bf16 panels and quantized blocks, shared ones once."""
        seen, total = set(), 0
        tensors = [p for p in self.parameters()]
        for m in self.modules():
            if isinstance(m, Linear):
                tensors += [m.small_m_weight] if m.small_m_weight is not None else []
                tensors += [t for w in m.quantized.values() for t in w.tensors()]
        if self.quantized_embedding is not None:
            tensors += list(self.quantized_embedding.tensors())
        for t in tensors:
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.nbytes)
            if t.nbytes and key not in seen:
                seen.add(key)
                total += t.nbytes
        return total

    def preparation_bytes(self) -> int:
        """Work of finish_init, counted as in its progress: each projection's weight bytes, once for packing
        and once for the move into huge pages."""
        return 2 * sum(m.weight.nbytes for m in self.modules()
                       if isinstance(m, Linear) and m.weight is not None and not m.is_quantized)

    def finish_init(self, max_positions: int, progress: Callable[[int], None] | None = None,
                    deterministic: bool = True, small_m_max: int = DEFAULT_SMALL_M_MAX, pack_bf16: bool = True,
                    decoder_stack: bool = True, quant_tiles: bool = True, q8_wide_activations: bool = True) -> None:
        """After the weights exist on CPU: tie embeddings, build the shared rotary cache, prepare the
        projections; progress(bytes prepared) as it goes (see preparation_bytes). deterministic: projections
        whose rows do not depend on the step's size (layers/linear.py). small_m_max, pack_bf16, decoder_stack,
        quant_tiles, q8_wide_activations: EngineConfig's switches for A/B runs."""
        table = self.quantized_embedding
        if self.args.tie_word_embeddings and table is not None:
            self.lm_head.set_quantized(None, table)
        elif self.args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rotary_caches(max_positions)
        prepared = 0
        for module in self.modules():
            if isinstance(module, Linear):
                weight_bytes = module.weight.nbytes if module.weight is not None and not module.is_quantized else 0
                module.finalize(keep_dense=module is self.lm_head and self.args.tie_word_embeddings,
                                kernels=self._kernels, deterministic=deterministic, small_m_max=small_m_max,
                                pack_bf16=pack_bf16)
                prepared += weight_bytes
                if progress is not None:
                    progress(prepared)
            elif isinstance(module, RMSNorm):
                module.finalize()
        self._panels_in_huge_pages()
        self._quantized_for_kernels(quant_tiles, q8_wide_activations)
        if progress is not None:
            progress(2 * prepared)
        for module in self.modules():
            if hasattr(module, "bind"):
                module.bind()
        embed = (self._quantized_lookup() or self._tied_panel_embedding()
                 or partial(F.embedding, weight=self.model.embed_tokens.weight))
        stack = DecoderStack.build(self, list(self.model.layers), self._kernels) if decoder_stack else None
        self.__dict__["_embed_scale"] = self._embedding_scale()
        self.__dict__.update(_layers=[layer.forward for layer in self.model.layers], _embed=embed,
                             _final_norm=self.model.norm.add_and_norm, _head=self.lm_head.forward, _stack=stack)

    def _embedding_scale(self) -> float | None:
        """The factor on token embeddings, or None. Gemma's sqrt(hidden) is rounded to the weights' dtype
        first, as transformers does (a bf16 model multiplies by bf16(sqrt(hidden)))."""
        scale = self.args.embedding_scale
        if scale == 1.0:
            return None
        if self.args.gemma:
            return float(torch.tensor(scale, dtype=torch.float32).to(self.model.norm.weight.dtype))
        return scale

    def _rotary_caches(self, max_positions: int) -> None:
        """One cos/sin cache per distinct RoPE (Gemma: local and global layers), none for NoPE layers."""
        caches = {}
        for layer, kind in zip(self.model.layers, self.args.rope_layers):
            if kind is not None and kind not in caches:
                caches[kind] = cos_sin_cache(self.args.config, self.args.head_dim, max_positions,
                                             layer_type=kind if self.args.gemma else None)
            layer.self_attn.rotary_cache = caches.get(kind)

    def _quantized_for_kernels(self, tiles: bool = True, q8_wide: bool = True) -> None:
        """Quantized weights take the tile layout where the kernels have it (x86 with AVX512-VNNI: one copy,
        read by the VNNI dots and the AMX tiles; ARM: its own order, read by SMMLA and SDOT), then move into huge
        pages (as the panels below): each is streamed every decode step. A weight shared by two users (a tied
        table and head) changes once. On x86 a Q8_0 model (every quantized weight Q8) runs at 16-bit
        activations unless q8_wide is False: it was chosen for quality; a Q8 table or tensor inside a 4/5-bit
        model keeps the 8-bit ones it was chosen for."""
        if self.__dict__.get("_weights_prepared"):
            return   # attached from a prepared-weights file: already tiled, in huge pages
        kept = self.__dict__.pop("_placed_weights", [])   # tiled in huge pages at load (gguf_load_plan.py)
        placed = {id(w) for w in kept}
        layers = [m for m in self.modules() if isinstance(m, Linear) and m.is_quantized]
        table = self.quantized_embedding
        unique, tileable = {}, {}
        users = [(w, m.run_tileable(i)) for m in layers for i, w in enumerate(m.quantized_run_weights())]
        users += [(table, table.tileable())] if table is not None else []
        for w, ok in users:
            unique.setdefault(id(w), w)
            tileable[id(w)] = tileable.get(id(w), True) and ok
        if not unique:
            return
        tiles = tiles and self._kernels is not None and self._kernels.tiles_native()
        q8_wide = q8_wide and all(w.kind == "q8" for w in unique.values())
        # a weight to tile takes slots of its tiled tensors (a K-quant's: the file's compact factors, x86)
        held = {key: w.present_for_tiles() if tiles and tileable[key] else w.present() for key, w in unique.items()
                if key not in placed}
        slots = iter(huge_page_slots([(t.shape, t.dtype) for ts in held.values() for t in ts]))
        slots_of = {key: [next(slots) for _ in ts] for key, ts in held.items()}
        del users, slots, w, ok, held   # no reference to an original beyond its users
        moved = {}

        def move(key: int) -> QuantWeight:
            """Copied into its slots (memory committed as written), tiled as it goes where it tiles; the
            original is then referenced by its users only, which take the copy next: one copy at a time."""
            if key not in moved:
                w = unique.pop(key)
                if key in placed:
                    moved[key] = w.with_wide_q8(q8_wide)
                elif tiles and tileable[key]:
                    moved[key] = w.tile_into(slots_of.pop(key), wide_q8=q8_wide)
                else:
                    copy = w.with_tensors([slot.copy_(t) for slot, t in zip(slots_of.pop(key), w.present())])
                    moved[key] = replace(copy, packed_factors=None).with_wide_q8(q8_wide)   # if tiled at load
            return moved[key]

        for m in layers:
            m.replace_run_weights([move(id(w)) for w in m.quantized_run_weights()])
            return_freed_memory()
        if table is not None:
            self.__dict__["quantized_embedding"] = move(id(table))

    def _panels_in_huge_pages(self) -> None:
        """Every projection's bf16 panels (the only copy of those weights) moved into one buffer backed by
        2 MiB pages: a decode step streams all of them, and on 4 KiB pages that stream pays a TLB miss every
        4 KiB (kernels/memory.py has the figures)."""
        layers = [m for m in self.modules()
                  if isinstance(m, Linear) and m.small_m_weight is not None and m.small_m_weight.dim() == 3]
        if layers:
            for layer, moved in zip(layers, pack_into_huge_pages([layer.small_m_weight for layer in layers])):
                layer.small_m_weight = moved

    def _quantized_lookup(self):
        """Token rows dequantized from a quantized table (the op, or its torch reference), or None."""
        table, dtype = self.quantized_embedding, self.model.norm.weight.dtype
        if table is None:
            return None
        if self._kernels is not None:
            return partial(self._kernels.quant_rows, table, dtype=dtype)
        return lambda ids: table.rows(ids).dequantize().to(dtype)

    def _tied_panel_embedding(self):
        """Tied embeddings whose lm_head runs on bf16 panels: token rows are read from the panels, and the
        dense [vocab, hidden] copy is dropped (57 MB for SmolLM2-135M). None when that does not apply."""
        head = self.lm_head
        if not self.args.tie_word_embeddings or head.small_m_weight is None or head.small_m_weight.dim() != 3:
            return None
        for module in (head, self.model.embed_tokens):
            del module.weight
            module.register_parameter("weight", None)
        head.finalize_dense_dropped()
        return partial(self._kernels.packed_rows, head.small_m_weight, width=head.in_features)

    def forward(self, input_ids: torch.Tensor, md: AttentionMetadata, kv_caches: list,
                logits_rows: torch.Tensor | None, lora=None) -> torch.Tensor:
        """lora: the LoRA manager when some token of this step uses an adapter (its hooks on the Linear
        layers apply it on the Python path; the decoder stack takes its stacks and segments)."""
        x = self._embed(input_ids)
        if self._embed_scale is not None:
            x = x.mul_(self._embed_scale)
        if self._stack is not None and self._stack.runs(x.shape[0], lora):
            x, residual = self._stack(x, md, kv_caches, lora)
        else:
            residual = None
            for layer, kv in zip(self._layers, kv_caches):
                x, residual = layer(x, residual, md, kv)
        if logits_rows is not None:  # only the last token of each chunk needs logits
            x, residual = x.index_select(0, logits_rows), residual.index_select(0, logits_rows)
        x, _ = self._final_norm(x, residual)
        logits = _to_fp32(self._head(x))
        if self.args.logits_divisor != 1.0:
            logits = logits.div_(self.args.logits_divisor)
        if self.args.final_softcap is not None:
            cap = self.args.final_softcap
            logits = torch.tanh(logits.div_(cap)).mul_(cap)
        return logits


SERIAL_COPY = 32767   # elements below torch's parallel grain (32768): the copy stays on this thread


def _to_fp32(logits: torch.Tensor) -> torch.Tensor:
    """logits.float(), for a decode step's few rows in column pieces small enough to copy serially: one
    parallel copy of a [1, vocab] row wakes the whole thread pool, which costs more than the copy itself
    (milliseconds when the cores are shared)."""
    rows, vocab = logits.shape
    if logits.dtype == torch.float32 or rows * vocab > 4 * SERIAL_COPY:
        return logits.float()
    out = torch.empty(rows, vocab, dtype=torch.float32)
    width = max(1, SERIAL_COPY // rows)
    for start in range(0, vocab, width):
        out[:, start:start + width].copy_(logits[:, start:start + width])
    return out

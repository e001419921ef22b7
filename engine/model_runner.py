"""ModelRunner: loads a model folder and runs one flat varlen batch per step over the paged KV cache.

execute(chunks) turns the scheduler's chunks into input_ids, positions, slot_mapping, query_start_loc,
seq_lens and block_tables (a few tensor ops, no per-token Python), runs the model and returns fp32 logits
of the last new token of each chunk.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from llmchat.kernels.memory import huge_page_zeros

from .attention import AttentionMetadata
from .config import EngineConfig
from .generation_defaults import default_values
from .layers.ops import select_ops
from .model_loader import LoadProgress, build_model, gguf_source, read_config, read_json, resolve_dtype
from .models import ModelArgs


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


class ModelRunner:
    def __init__(self, config: EngineConfig, load_progress: LoadProgress | None = None) -> None:
        self.config = config
        folder = Path(config.model_path)
        raw = read_config(folder)
        self.args = ModelArgs.from_config(raw)        # unsupported architecture -> ValueError here
        self.raw_config = raw
        self.dtype = resolve_dtype(config.dtype, raw, quantized=gguf_source(folder) is not None)
        self.max_model_len = self._max_model_len(config.max_model_len)
        self.vocab_size = self.args.vocab_size
        self.block_size = config.block_size
        gen = read_json(folder / "generation_config.json") if (folder / "generation_config.json").exists() else {}
        self.eos_token_ids = list(dict.fromkeys(_ids(raw.get("eos_token_id")) + _ids(gen.get("eos_token_id"))))
        self.generation_defaults = default_values(gen)
        self.ops, self.kernels = select_ops(config.attention_backend)
        self.attention_backend = "kernels" if self.kernels is not None else "torch"
        with torch.inference_mode():
            self.model = build_model(folder, raw, self.dtype, self.max_model_len, self.ops, self.kernels,
                                     load_progress, quantize=config.quantize, deterministic=config.deterministic,
                                     small_m_max=config.small_m_max, pack_bf16=config.pack_bf16,
                                     decoder_stack=config.decoder_stack, quant_tiles=config.quant_tiles,
                                     q8_wide_activations=config.q8_wide_activations,
                                     prepared_cache=config.prepared_cache, prepared_mmap=config.prepared_mmap)
        self.key_caches: list[torch.Tensor] = []
        self.value_caches: list[torch.Tensor] = []
        self.num_blocks = 0
        self.window_blocks = 0
        # LoRA: an object with set_step(chunks, metadata) called before each forward, whose hooks sit on
        # the Linear layers (layer.lora). None = base model only. See layers/linear.py.
        self.lora_manager = None

    def _max_model_len(self, requested: int | None) -> int:
        limit = self.args.max_position_embeddings
        if requested is None:
            return limit
        if requested <= 0 or requested > limit:
            raise ValueError(f"max_model_len must be in 1..{limit} (the model's context), got {requested}")
        return requested

    # ---- KV cache -------------------------------------------------------------------------------------
    @property
    def window_layers(self) -> list[int]:
        """Layers whose KV goes to the window pool (hybrid_blocks.py): the sliding ones of a model that has
        full layers too, when EngineConfig.window_kv is on; else none (one pool)."""
        windows = self.args.sliding_windows
        if not self.config.window_kv or all(w > 0 for w in windows):
            return []
        return [i for i, w in enumerate(windows) if w > 0]

    @property
    def kv_window(self) -> int:
        return max((self.args.sliding_windows[i] for i in self.window_layers), default=-1)

    def kv_block_bytes(self, num_layers: int | None = None) -> int:
        """Bytes of one block over num_layers layers (all of them by default)."""
        a = self.args
        layers = a.num_layers if num_layers is None else num_layers
        return 2 * layers * a.num_kv_heads * self.block_size * a.head_dim * self.dtype.itemsize

    def _cache(self, num_layers: int, num_blocks: int) -> torch.Tensor:
        a = self.args
        per_group = self.config.kv_blocks_per_group
        groups = -(-num_blocks // per_group)
        return huge_page_zeros((num_layers, 2, groups, a.num_kv_heads, per_group, self.block_size, a.head_dim),
                               self.dtype)

    def allocate_kv_cache(self, num_blocks: int, window_blocks: int = 0) -> None:
        """Zeroed tensors [layers, 2, groups, Hkv, blocks_per_group, block_size, D] in huge-page backed memory
        (see kernels/memory.py); per-layer K and V are views. Block b is group b // blocks_per_group: a sequence
        holding consecutive blocks of a group has each head's K/V in one run (the block manager hands them out
        that way). The last group may hold a few blocks the block manager never uses. With window_blocks, the
        window layers get a cache of their own of that many blocks (window_layers)."""
        window = set(self.window_layers) if window_blocks else set()
        full_layers = [i for i in range(self.args.num_layers) if i not in window]
        caches = {}
        for layers, blocks in ((full_layers, num_blocks), (sorted(window), window_blocks)):
            if layers:
                cache = self._cache(len(layers), blocks)
                caches.update({layer: cache[j] for j, layer in enumerate(layers)})
                if layers is full_layers:
                    self.full_cache = cache
        self.key_caches = [caches[i][0] for i in range(self.args.num_layers)]
        self.value_caches = [caches[i][1] for i in range(self.args.num_layers)]
        self.num_blocks = num_blocks
        self.window_blocks = window_blocks

    @property
    def block_kv_shape(self) -> tuple[int, ...]:
        layers, two, _, heads, _, block_size, dim = self.full_cache.shape
        return layers, two, heads, block_size, dim

    def block_kv(self, block_id: int) -> torch.Tensor:
        """A copy of one block's K and V over the full layers: [layers, 2, Hkv, block_size, D]."""
        per_group = self.config.kv_blocks_per_group
        return self.full_cache[:, :, block_id // per_group, :, block_id % per_group].clone()

    def set_block_kv(self, block_id: int, data: torch.Tensor) -> None:
        """Write one block's K and V (as block_kv gives them) into the cache."""
        per_group = self.config.kv_blocks_per_group
        self.full_cache[:, :, block_id // per_group, :, block_id % per_group] = data

    # ---- one step ---------------------------------------------------------------------------------------
    def prepare(self, chunks) -> tuple[torch.Tensor, AttentionMetadata, torch.Tensor]:
        input_ids: list[int] = []
        starts, query_lens, seq_lens, tables = [], [], [], []
        for chunk in chunks:
            seq, n = chunk.seq, chunk.num_new_tokens
            start = seq.num_computed_tokens
            input_ids.extend(chunk.input_ids)
            starts.append(start)
            query_lens.append(n)
            seq_lens.append(start + n)
            tables.append(seq.block_table)
        q_lens = torch.tensor(query_lens, dtype=torch.int64)
        qsl = torch.zeros(len(chunks) + 1, dtype=torch.int64)
        torch.cumsum(q_lens, 0, out=qsl[1:])
        total = int(sum(query_lens))
        if total == len(chunks):  # all decodes, one token per sequence
            positions, seq_index = torch.tensor(starts, dtype=torch.int64), None
        else:
            seq_index = torch.repeat_interleave(torch.arange(len(chunks)), q_lens)
            positions = torch.arange(total) - qsl[:-1][seq_index] + torch.tensor(starts)[seq_index]
        block_tables, slot_mapping = self._paging(tables, starts, positions, seq_index)
        md = AttentionMetadata(
            positions=positions, slot_mapping=slot_mapping, query_start_loc=qsl.to(torch.int32),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32), block_tables=block_tables,
            query_lens=query_lens, seq_lens_list=seq_lens, block_size=self.block_size)
        if self.window_blocks:
            window_tables, window_slots = self._paging([c.seq.window_table for c in chunks], starts, positions,
                                                       seq_index)
            md.window = replace(md, block_tables=window_tables, slot_mapping=window_slots, _torch_plan={})
        logits_rows = None if total == len(chunks) else qsl[1:] - 1
        if any(c.draft for c in chunks):   # a chunk with guesses: every guessed position's row too
            logits_rows = torch.cat([torch.arange(int(end) - len(c.draft) - 1, int(end))
                                     for c, end in zip(chunks, qsl[1:])])
        return torch.tensor(input_ids, dtype=torch.int64), md, logits_rows

    def _paging(self, tables, starts, positions, seq_index) -> tuple[torch.Tensor, torch.Tensor]:
        """(block_tables [S, max_blocks] padded with 0, slot_mapping [T]) of one pool's tables."""
        bs = self.block_size
        max_blocks = max(len(t) for t in tables)
        block_tables = torch.tensor([t + [0] * (max_blocks - len(t)) for t in tables], dtype=torch.int32)
        if seq_index is None:  # decodes: slots from the host lists
            slots = torch.tensor([t[p // bs] * bs + p % bs for t, p in zip(tables, starts)], dtype=torch.int64)
        else:
            blocks = block_tables.long()[seq_index, torch.div(positions, bs, rounding_mode="floor")]
            slots = blocks * bs + positions % bs
        return block_tables, slots

    def execute(self, chunks) -> torch.Tensor:
        """fp32 logits [rows, vocab]: chunk by chunk, the row after its last new token, preceded by the rows
        of its guessed positions when it has guesses (one row per chunk without any)."""
        if not chunks:
            return torch.empty(0, self.vocab_size)
        if not self.key_caches:
            raise RuntimeError("allocate_kv_cache() must be called before execute()")
        with torch.inference_mode():
            restore = None
            if self.lora_manager is not None:   # LoRA: each adapter's tokens contiguous, rows restored below
                chunks, restore = self.lora_manager.group_chunks(chunks)
            input_ids, md, rows = self.prepare(chunks)
            if self.lora_manager is not None:
                self.lora_manager.set_step(chunks, md)
            kv = list(zip(self.key_caches, self.value_caches))
            lora = self.lora_manager if self.lora_manager is not None and self.lora_manager.in_step() else None
            logits = self.model(input_ids, md, kv, rows, lora=lora)
            return logits if restore is None else logits.index_select(0, _row_order(chunks, restore))


def _row_order(grouped: list, restore: torch.Tensor) -> torch.Tensor:
    """The chunk permutation `restore` (grouped order -> the caller's) over logits rows: a chunk with
    guesses has one row per guessed position besides its last."""
    counts = [1 + len(c.draft) for c in grouped]
    if all(n == 1 for n in counts):
        return restore
    starts = [0]
    for n in counts[:-1]:
        starts.append(starts[-1] + n)
    return torch.cat([torch.arange(starts[g], starts[g] + counts[g]) for g in restore.tolist()])

"""The engine's side of the KV disk tier (kv_disk.py): what identifies a model's KV bits, blocks restored into
a fresh sequence's table after its RAM prefix match, and computed blocks handed to the writer after a step."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import torch

from .kv_disk import KV_LAYOUT_VERSION, KVDiskTier, block_digest
from .model_loader import gguf_source
from .sequence import Sequence

HERE = Path(__file__).resolve().parent


def _stats(paths) -> list:
    out = []
    for path in sorted(paths):
        try:
            stat = path.stat()
        except OSError:
            continue
        out.append([path.name, stat.st_size, stat.st_mtime_ns])
    return out


def kv_identity(config, runner) -> dict:
    """Everything that shapes a block's KV bits: the model's files (the GGUF a library entry points to), the
    dtype, the kernels' paths, the engine switches, the cache layout, and this llmchat's code (version, the
    compiled kernels and the model code, by size and mtime)."""
    folder = Path(config.model_path)
    gguf = gguf_source(folder)
    model_files = [p for p in folder.iterdir() if p.is_file()] + ([gguf] if gguf is not None else [])
    kernels = runner.kernels
    paths = {}
    if kernels is not None:
        paths = {"level": kernels.level(), "isa": kernels.isa(), "tiles": kernels.tiles_isa(),
                 "quant": kernels.quant_isa()}
    code = [*HERE.joinpath("models").glob("*.py"), *HERE.joinpath("layers").glob("*.py"),
            *HERE.parent.joinpath("kernels").glob("*.so")]
    try:
        version = importlib.metadata.version("llmchat")
    except importlib.metadata.PackageNotFoundError:
        version = "source"
    return {"kv_layout": KV_LAYOUT_VERSION, "llmchat": version, "code": _stats(code),
            "model": str(folder.resolve()), "files": _stats(model_files), "dtype": str(runner.dtype),
            "block_size": config.block_size, "attention": runner.attention_backend, "kernels": paths,
            "switches": {name: getattr(config, name) for name in (
                "quantize", "deterministic", "small_m_max", "decoder_stack", "lora_fused", "pack_bf16",
                "quant_tiles", "q8_wide_activations", "max_model_len")}}


class DiskPrefix:
    """Extends RAM prefix matches from disk and writes newly computed full blocks there."""

    def __init__(self, tier: KVDiskTier, runner, block_manager) -> None:
        self.tier, self.runner, self.block_manager = tier, runner, block_manager
        self.block_size = block_manager.block_size
        self.block_bytes = runner.kv_block_bytes()

    def digests(self, seq: Sequence, count: int) -> list[bytes]:
        """seq's chained block digests, computed up to `count` blocks (kept on the sequence: tokens only grow)."""
        chain = seq.disk_digests
        bs = self.block_size
        for i in range(len(chain), count):
            chain.append(block_digest(chain[-1] if chain else None, seq.token_ids[i * bs:(i + 1) * bs],
                                      seq.adapter_key))
        return chain

    def restore(self, seq: Sequence) -> int:
        """After the RAM match: read the blocks that continue seq's prefix on disk into fresh blocks (as many as
        are free), computed and registered in the RAM prefix cache. Returns the tokens restored."""
        manager, bs = self.block_manager, self.block_size
        start, lookup = len(seq.block_table), (seq.num_tokens - 1) // bs
        if start >= lookup or not self.tier.enabled:
            return 0
        chain = self.digests(seq, lookup)
        self.tier.looked_up_tokens += (lookup - start) * bs
        restored = 0
        for i in range(start, lookup):
            if manager.num_free_blocks == 0 or not self.tier.present(chain[i]):
                break
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            payload = self.tier.read(chain[i], tokens, self.block_bytes)
            if payload is None:
                break
            manager.allocate(seq, bs)
            data = torch.frombuffer(bytearray(payload), dtype=self.runner.dtype)
            self.runner.set_block_kv(seq.block_table[-1], data.view(self.runner.block_kv_shape))
            seq.num_computed_tokens += bs
            restored += bs
        if restored:
            manager.register_full_blocks(seq)
            self.tier.hit_tokens += restored
            seq.disk_restored_tokens += restored
        return restored

    def save(self, chunks) -> None:
        """After a step: queue the full blocks the step completed (registered ones) for the disk."""
        for chunk in chunks:
            seq = chunk.seq
            full = len(seq.block_hashes)
            if full <= seq.disk_saved:
                continue
            chain = self.digests(seq, full)
            bs = self.block_size
            for i in range(seq.disk_saved, full):
                if self.tier.wants(chain[i]):
                    kv = self.runner.block_kv(seq.block_table[i]).view(-1).view(torch.uint8).numpy()
                    self.tier.write(chain[i], tuple(seq.token_ids[i * bs:(i + 1) * bs]), kv)
            seq.disk_saved = full

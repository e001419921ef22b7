"""Engine settings: one dataclass, validated once, shared by scheduler, block manager and model runner."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# Steps of up to this many tokens run kernels.linear_small_m: faster than oneDNN up to M=64 here, measured
# per op and end to end (layers/linear.py).
DEFAULT_SMALL_M_MAX = 32


def _env_switch(name: str, default: int) -> int:
    """An A/B switch's default: the environment variable where it is set (so `LLMCHAT_LORA_FUSED=0 llmchat
    bench ...` reaches engines a benchmark builds, in its own process or a server's), else the fast path."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


@dataclass
class EngineConfig:
    model_path: Path
    dtype: str = "auto"                  # "auto" (config's torch_dtype, bf16 if fp16 unsupported), "float32", "bfloat16", "float16"
    quantize: str | None = None          # "q8_0" | "q4_0" | "q4_k": quantize a 16/32-bit model's projections at load
    kv_cache_gb: float | None = None     # None: derived from free RAM (see block manager sizing)
    block_size: int = 16                 # tokens per KV block (the prefix cache's unit of reuse)
    kv_blocks_per_group: int | None = None  # blocks stored as one run per kv head; None: 64 tokens' worth
    enable_prefix_caching: bool = True
    max_num_seqs: int = 64               # running sequences at most
    max_num_batched_tokens: int = 512    # token budget per step (decodes + prefill chunks)
    step_target_s: float = 0.15          # while sessions decode, prefill chunks sized for steps this long (0: off)
    max_model_len: int | None = None     # None: the model's max_position_embeddings
    attention_backend: str = "kernels"   # "kernels" (C++), or "torch" (pure-torch reference, the oracle)
    num_threads: int | None = None       # torch intra-op threads; None = torch's default
    max_adapters: int = 8                # LoRA adapters resident at once (LRU beyond that)
    adapter_memory_gb: float = 1.0       # memory budget of resident LoRA adapters
    # A request's tokens and logits do not depend on the batch, the prefix cache, chunking or threads (the
    # kernels backend; docs/performance.md, Determinism). False: library GEMMs for prefill-size steps (A/B bench).
    deterministic: bool = True
    # Switches for A/B runs, each keeping a reference path (docs/engine-api.md, "Engine switches"). The
    # defaults are the fast paths; the LLMCHAT_* environment variables named here override the defaults, and
    # they are read nowhere else.
    # Steps of up to this many tokens run the small-M linear kernel (layers/linear.py; deterministic and bf16
    # panels make it every step size); 0: it is off, every projection runs the library GEMM. LLMCHAT_SMALL_M_MAX.
    small_m_max: int = field(default_factory=lambda: _env_switch("LLMCHAT_SMALL_M_MAX", DEFAULT_SMALL_M_MAX))
    # Every decoder layer in one C++ call where the model allows it (models/decoder_stack.py); False: the
    # Python layers. LLMCHAT_DECODER_STACK=0.
    decoder_stack: bool = field(default_factory=lambda: _env_switch("LLMCHAT_DECODER_STACK", 1) != 0)
    # LoRA in one fused kernel call per projection, adapter weights in the model's dtype; False: the fp32
    # torch path (lora/stack.py). LLMCHAT_LORA_FUSED=0.
    lora_fused: bool = field(default_factory=lambda: _env_switch("LLMCHAT_LORA_FUSED", 1) != 0)
    # bf16 weights that run the library GEMM are pre-packed for oneDNN (layers/linear.py, pack()); False: plain.
    pack_bf16: bool = True
    # Quantized weights of 16-row groups take the tile layout where the kernels have it (x86 with AVX512-VNNI:
    # VNNI dots and AMX-INT8 tiles; ARM: SMMLA / SDOT, kernels/quant.py); False: the row layout. LLMCHAT_QUANT_TILES=0.
    quant_tiles: bool = field(default_factory=lambda: _env_switch("LLMCHAT_QUANT_TILES", 1) != 0)
    # Q8_0 weights on the x86 tile layout take 16-bit activations: the model computes what its weights say
    # (KL ~1e-7 against them dequantized), for ~10-25% of the speed; False: 8-bit, as the other kinds and
    # llama.cpp. LLMCHAT_Q8_WIDE=0.
    q8_wide_activations: bool = field(default_factory=lambda: _env_switch("LLMCHAT_Q8_WIDE", 1) != 0)
    # A GGUF model's quantized weights, as the kernels run them, kept in a cache file (LLMCHAT_CACHE_DIR or the
    # platform's cache dir) and used from there on the next start instead of repacked
    # (engine/quant/prepared_cache.py). LLMCHAT_PREPARED_CACHE=0.
    prepared_cache: bool = field(default_factory=lambda: _env_switch("LLMCHAT_PREPARED_CACHE", 1) != 0)
    # That file mapped into memory (shared with every process running the model, nothing copied); False: read
    # into huge-page memory of the process' own. LLMCHAT_PREPARED_MMAP=0.
    prepared_mmap: bool = field(default_factory=lambda: _env_switch("LLMCHAT_PREPARED_MMAP", 1) != 0)
    # Models with full and sliding-window layers keep the window layers' KV for the window only, in a pool of
    # its own (hybrid_blocks.py); False: one pool, every layer's KV for the whole context. LLMCHAT_WINDOW_KV=0.
    window_kv: bool = field(default_factory=lambda: _env_switch("LLMCHAT_WINDOW_KV", 1) != 0)
    # Draft-free speculative decoding (speculation.py): "auto" guesses while few sequences decode, "ngram"
    # always, "off" never. The tokens are the same either way. LLMCHAT_SPECULATIVE.
    speculative: str = field(default_factory=lambda: os.environ.get("LLMCHAT_SPECULATIVE", "").strip() or "auto")
    # Full KV blocks also go to a disk tier under the prefix cache (kv_disk.py, in LLMCHAT_CACHE_DIR or the
    # platform's cache dir), so a chat reopened after a restart starts warm; False: RAM only. LLMCHAT_KV_DISK=0.
    kv_disk: bool = field(default_factory=lambda: _env_switch("LLMCHAT_KV_DISK", 1) != 0)
    kv_disk_gb: float | None = None      # the disk tier's budget; None: 4 GiB or a tenth of the free disk
    # A draft model (draft_model.py): a smaller model with the same tokenizer that guesses where the text offers
    # no n-gram to look up (folder, .gguf file or library name; LLMCHAT_DRAFT_MODEL). Its KV cache: None holds
    # as many tokens as the target's.
    draft_model: str | Path | None = field(default_factory=lambda: os.environ.get("LLMCHAT_DRAFT_MODEL", "").strip()
                                           or None)
    draft_kv_cache_gb: float | None = None

    def __post_init__(self) -> None:
        self.model_path = Path(self.model_path)
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if self.quantize is not None and self.quantize not in ("q8_0", "q4_0", "q4_k"):
            raise ValueError(f"quantize must be q8_0, q4_0 or q4_k, got {self.quantize!r}")
        if self.attention_backend not in ("kernels", "torch"):
            raise ValueError(f"attention_backend must be 'kernels' or 'torch', got {self.attention_backend!r}")
        if self.block_size <= 0 or self.block_size % 8:
            raise ValueError(f"block_size must be a positive multiple of 8, got {self.block_size}")
        if self.kv_blocks_per_group is None:
            # decode attention reads a sequence's K/V per head: 64-token runs stream at 28-31 GB/s here,
            # scattered 16-token pieces at 19-24 (python -m llmchat.engine.bench.kernels --blocks-per-group 4|1)
            self.kv_blocks_per_group = max(1, 64 // self.block_size)
        if self.kv_blocks_per_group <= 0:
            raise ValueError(f"kv_blocks_per_group must be positive, got {self.kv_blocks_per_group}")
        if self.kv_cache_gb is not None and self.kv_cache_gb <= 0:
            raise ValueError(f"kv_cache_gb must be > 0, got {self.kv_cache_gb}")
        if self.step_target_s < 0:
            raise ValueError(f"step_target_s must be >= 0 (0 turns the time cap off), got {self.step_target_s}")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_adapters <= 0 or self.adapter_memory_gb <= 0:
            raise ValueError("max_adapters and adapter_memory_gb must be positive")
        if self.kv_disk_gb is not None and self.kv_disk_gb <= 0:
            raise ValueError(f"kv_disk_gb must be > 0, got {self.kv_disk_gb}")
        if self.speculative not in ("auto", "ngram", "off"):
            raise ValueError(f"speculative must be auto, ngram or off, got {self.speculative!r}")
        if self.draft_kv_cache_gb is not None and self.draft_kv_cache_gb <= 0:
            raise ValueError(f"draft_kv_cache_gb must be > 0, got {self.draft_kv_cache_gb}")
        if self.small_m_max < 0:
            raise ValueError(f"small_m_max must be >= 0 (0 turns the small-M kernel off), got {self.small_m_max}")

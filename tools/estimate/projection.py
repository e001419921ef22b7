"""Decode and prefill tokens/s on paper, from bytes per token, cycles per weight and memory bandwidth.

Decode (one session): each token reads every weight once plus the KV cache; time = max(bytes / bandwidth,
cycles / (threads x clock)) for the projections and attention (a roofline that assumes reads and compute
overlap perfectly: an upper bound). Prefill: compute only (a chunk of tokens shares every weight read), the
GEMM loop's cycles per weight per token, plus attention at half the prompt. Not counted: norms, rotary,
activation quantization, softmax, sampling, threads waiting on each other.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def weights(self) -> int:
        """Weights a token reads: every projection, and the (tied) embedding as the output head."""
        attn = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim + self.heads * self.head_dim * self.hidden
        return self.layers * (attn + 3 * self.hidden * self.intermediate) + self.vocab * self.hidden

    def attention_macs(self, context: int) -> int:
        """QK and P.V multiply-accumulates of one token against `context` keys, all layers."""
        return 2 * self.layers * self.heads * context * self.head_dim

    def kv_bytes(self, context: int, elem: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * context * elem


MODELS = [  # from their config.json
    Model("SmolLM2-135M", 30, 576, 9, 3, 64, 1536, 49152),
    Model("Llama-3.2-1B", 16, 2048, 32, 8, 64, 8192, 128256),
    Model("Llama-3.2-3B", 28, 3072, 24, 8, 128, 8192, 128256),
]

# Bytes per weight as stored: Q4_0 and Q8_0 keep one fp16 scale per 32 weights.
FORMATS = {"Q4_0": 18 / 32, "Q8_0": 34 / 32, "bf16": 2.0}


# Where the core has bf16 the engine packs bf16 weights into 16-row panels, and a step of two or more tokens
# (a prefill chunk) runs BFMMLA tiles over them (core/packed_linear.cpp); elsewhere prefill is the dense GEMV.
BF16_PREFILL_PACKED = "bf16 packed panels, BFMMLA"


def prefill_loop(fmt: str, default: str, features: frozenset) -> str:
    """The loop table row a prefill of `fmt` weights runs on a core with `features` (default: the format's own)."""
    return BF16_PREFILL_PACKED if fmt == "bf16" and "bf16" in features else default


def attention_loop(row: str, features: frozenset) -> str:
    """The loop table row our bf16-cache attention runs for `row` ("attention QK, D=64", ...) on a core with
    `features`: BFMMLA tiles for every row where the core has bf16 (core/attention_bfmmla.h)."""
    return f"{row}, BFMMLA" if "bf16" in features else row


@dataclass(frozen=True)
class Machine:
    name: str
    cpu_key: str          # whose loop estimates apply (cpus.py)
    threads: int
    ghz: float
    bandwidth_gbs: float  # what `threads` cores can read together (assumed: see docs/performance.md)


def machines(ghz: dict[str, float]) -> list[Machine]:
    # Graviton 3: 8 x DDR5-4800 = 307 GB/s per socket; one vCPU is one core, assumed to read ~25 GB/s alone.
    # Apple M2: 100 GB/s LPDDR5 (Apple's figure); one P-core assumed ~60 GB/s (M1's was measured near that).
    return [
        Machine("Graviton 3, 2 vCPU", "neoverse-v1", 2, ghz["neoverse-v1"], min(307, 2 * 25)),
        Machine("Graviton 3, 8 vCPU", "neoverse-v1", 8, ghz["neoverse-v1"], min(307, 8 * 25)),
        Machine("Apple M2, 4 P-cores", "apple-m2", 4, ghz["apple-m2"], min(100, 4 * 60)),
    ]


@dataclass
class Projection:
    decode_tok_s: float
    decode_bound: str     # "memory" or "compute"
    prefill_tok_s: float


def project(model: Model, fmt: str, m: Machine, gemv_cpm: float, gemm_cpm: float, attn_cpm: float,
            context: int = 512, prompt: int = 512) -> Projection:
    """gemv_cpm / gemm_cpm: cycles per weight (per token) of the decode / prefill loop on one core; attn_cpm:
    cycles per QK + P.V multiply-accumulate (their mean)."""
    hz = m.ghz * 1e9 * m.threads
    bytes_per_token = model.weights * FORMATS[fmt] + model.kv_bytes(context)
    t_mem = bytes_per_token / (m.bandwidth_gbs * 1e9)
    t_compute = (model.weights * gemv_cpm + model.attention_macs(context) * attn_cpm) / hz
    prefill_cycles = model.weights * gemm_cpm + model.attention_macs(prompt // 2) * attn_cpm
    return Projection(1 / max(t_mem, t_compute), "memory" if t_mem >= t_compute else "compute", hz / prefill_cycles)

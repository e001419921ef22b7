"""The loops estimated: ours from tools/estimate/csrc, llama.cpp's from the tree the user points to.

Each row of a table pairs our loop with llama.cpp's equivalents. Work is counted in multiply-accumulates
(MACs): for a GEMV one MAC is one weight, for a GEMM one weight times one token, for attention one element
of one key for one query row (so cycles per key and query head = cycles per MAC x head size).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUR_SOURCES = HERE / "csrc"
OUR_INCLUDES: list[Path] = [HERE.parents[1] / "kernels" / "csrc"]  # the kernels' sources, from the checkout


@dataclass(frozen=True)
class LoopSpec:
    row: str            # the table row (an operation)
    side: str           # "llmchat" or "llama.cpp"
    name: str           # what the column shows
    source: str         # ours: a file in csrc/; llama.cpp: a path under its ggml/src/ggml-cpu (or ours: prefix)
    function: str
    kind: str = "int"   # "int", "int1", "float" or "mul" (asm_loop.macs_of)
    want: str = ""      # regex the loop must contain (one code path of a function with several)
    avoid: str = ""
    needs: frozenset = frozenset()  # core features the path needs ("i8mm", "bf16"); otherwise not run there
    without: frozenset = frozenset()  # features whose presence means the engine takes another path


OURS = [
    # The ARM tile layout (core/quant_tiles_neon.cpp), which the engine gives Q4_0 / Q8_0 weights of 16-row
    # groups: decode 16 rows x 1 token on SDOT; prefill SMMLA tiles of 8 rows x 4 tokens with i8mm, else SDOT.
    LoopSpec("Q4_0 GEMV (decode)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp", "est_tiles_q4_0_decode"),
    LoopSpec("Q4_0 GEMM (prefill)", "llmchat", "tiles", "quant_tile_loops.cpp", "est_tiles_q4_0_prefill"),
    LoopSpec("Q8_0 GEMV (decode)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp", "est_tiles_q8_0_decode"),
    LoopSpec("Q8_0 GEMM (prefill)", "llmchat", "tiles", "quant_tile_loops.cpp", "est_tiles_q8_0_prefill"),
    # K-quants there: Q4_K on the file's u6 sc and m (unpacked once a block for 16 rows), Q6_K in its 6 bits
    LoopSpec("Q4_K GEMV (decode)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp", "est_tiles_q4_k_decode"),
    LoopSpec("Q4_K GEMM (prefill)", "llmchat", "tiles", "quant_tile_loops.cpp", "est_tiles_q4_k_prefill"),
    LoopSpec("Q5_K GEMV (decode)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp", "est_tiles_q5_k_decode"),
    LoopSpec("Q5_K GEMM (prefill)", "llmchat", "tiles", "quant_tile_loops.cpp", "est_tiles_q5_k_prefill"),
    LoopSpec("Q6_K GEMV (decode)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp", "est_tiles_q6_k_decode"),
    LoopSpec("Q6_K GEMM (prefill)", "llmchat", "tiles", "quant_tile_loops.cpp", "est_tiles_q6_k_prefill"),
    LoopSpec("Q6_K GEMV, 8 bits (LLMCHAT_Q6K_BITS=8)", "llmchat", "tiles 16x1", "quant_tile_loops.cpp",
             "est_tiles_q6_k_8bit_decode"),
    # The row layout (core/quant_linear.cpp: other rows counts, and LLMCHAT_QUANT_TILES=0): SDOT tiles; with
    # i8mm SMMLA tiles for every M, decode's one token paired with a copy of itself ("int1": not counted).
    LoopSpec("Q4_0 GEMV, row layout", "llmchat", "tile 4x1", "quant_loops.cpp", "est_q4_0_decode", "int1"),
    LoopSpec("Q4_0 GEMM, row layout", "llmchat", "tile 4x4", "quant_loops.cpp", "est_q4_0_prefill"),
    LoopSpec("Q8_0 GEMV, row layout", "llmchat", "tile 4x1", "quant_loops.cpp", "est_q8_0_decode", "int1"),
    LoopSpec("Q8_0 GEMM, row layout", "llmchat", "tile 4x4", "quant_loops.cpp", "est_q8_0_prefill"),
    LoopSpec("bf16 GEMV (decode and prefill)", "llmchat", "4 rows", "gemv_loops.cpp", "est_gemv_bf16", "float"),
    LoopSpec("fp32 GEMV", "llmchat", "4 rows", "gemv_loops.cpp", "est_gemv_f32", "float"),
    # Where the core has bf16 the engine packs bf16 weights into 16-row panels (core/packed_linear.cpp, BFDOT).
    LoopSpec("bf16 packed panels, 1 token", "llmchat", "BFDOT panels", "packed_loops.cpp", "est_packed_bf16_decode",
             "float", needs=frozenset({"bf16"})),
    LoopSpec("bf16 packed panels, token block", "llmchat", "BFDOT panels", "packed_loops.cpp", "est_packed_bf16_batch",
             "float", needs=frozenset({"bf16"})),
    # What steps of two or more tokens run there: BFMMLA tiles of 8 rows x 10 tokens over the same panels.
    LoopSpec("bf16 packed panels, BFMMLA", "llmchat", "BFMMLA 8x10", "packed_loops.cpp", "est_packed_bf16_bfmmla",
             "float", needs=frozenset({"bf16"})),
    LoopSpec("attention QK, D=64", "llmchat", "bf16 cache", "attention_loops.cpp", "est_qk_d64", "float"),
    LoopSpec("attention QK, D=128", "llmchat", "bf16 cache", "attention_loops.cpp", "est_qk_d128", "float"),
    LoopSpec("attention P.V, D=64", "llmchat", "bf16 cache", "attention_loops.cpp", "est_pv_d64", "float"),
    LoopSpec("attention P.V, D=128", "llmchat", "bf16 cache", "attention_loops.cpp", "est_pv_d128", "float"),
    # What a bf16 cache runs where the core has bf16 (core/attention_bfmmla.h): BFMMLA tiles for every row, the main
    # blocks: QK a trip of 8 rows x 8 keys x 8 d, P.V 4 rows x 16 columns x 8 keys (32 BFMMLAs of 16 MACs each).
    LoopSpec("attention QK, D=64, BFMMLA", "llmchat", "BFMMLA 8x8", "attention_loops.cpp", "est_qk_bfmmla_d64", "float",
             needs=frozenset({"bf16"})),
    LoopSpec("attention QK, D=128, BFMMLA", "llmchat", "BFMMLA 8x8", "attention_loops.cpp", "est_qk_bfmmla_d128", "float",
             needs=frozenset({"bf16"})),
    LoopSpec("attention P.V, D=64, BFMMLA", "llmchat", "BFMMLA 4x16", "attention_loops.cpp", "est_pv_bfmmla_d64", "float",
             needs=frozenset({"bf16"})),
    LoopSpec("attention P.V, D=128, BFMMLA", "llmchat", "BFMMLA 4x16", "attention_loops.cpp", "est_pv_bfmmla_d128", "float",
             needs=frozenset({"bf16"})),
    # decode's one row pair (groups of 1 or 2 query heads; with 1, half of each BFMMLA is the zero padding row)
    LoopSpec("attention QK, D=128, BFMMLA 2 rows", "llmchat", "BFMMLA 2x16", "attention_loops.cpp",
             "est_qk_bfmmla_pair_d128", "float", needs=frozenset({"bf16"})),
    LoopSpec("attention P.V, D=128, BFMMLA 2 rows", "llmchat", "BFMMLA 2x32", "attention_loops.cpp",
             "est_pv_bfmmla_pair_d128", "float", needs=frozenset({"bf16"})),
]

QUANTS, REPACK, VEC = "arch/arm/quants.c", "arch/arm/repack.cpp", "vec.cpp"
LLAMA = [
    # Plain GGUF rows (vec_dot, one row at a time; i8mm cores take two rows x two tokens with SMMLA for prefill).
    LoopSpec("Q4_0 GEMV (decode)", "llama.cpp", "vec_dot", QUANTS, "ggml_vec_dot_q4_0_q8_0", avoid="mmla"),
    LoopSpec("Q4_0 GEMM (prefill)", "llama.cpp", "vec_dot", QUANTS, "ggml_vec_dot_q4_0_q8_0", want="smmla",
             needs=frozenset({"i8mm"})),
    LoopSpec("Q8_0 GEMV (decode)", "llama.cpp", "vec_dot", QUANTS, "ggml_vec_dot_q8_0_q8_0", avoid="mmla"),
    LoopSpec("Q8_0 GEMM (prefill)", "llama.cpp", "vec_dot", QUANTS, "ggml_vec_dot_q8_0_q8_0", want="smmla",
             needs=frozenset({"i8mm"})),
    # What llama.cpp runs by default on ARM: weights repacked at load into interleaved rows (4x4 with dotprod,
    # 4x8 with i8mm; SVE-256 cores such as Graviton 3 take 8x8 SVE kernels, not estimated here).
    LoopSpec("Q4_0 GEMV (decode)", "llama.cpp", "repacked", REPACK, "ggml_gemv_q4_0_4x4_q8_0", without=frozenset({"i8mm"})),
    LoopSpec("Q4_0 GEMV (decode)", "llama.cpp", "repacked", REPACK, "ggml_gemv_q4_0_4x8_q8_0", needs=frozenset({"i8mm"})),
    LoopSpec("Q4_0 GEMM (prefill)", "llama.cpp", "repacked", REPACK, "ggml_gemm_q4_0_4x4_q8_0", without=frozenset({"i8mm"})),
    LoopSpec("Q4_0 GEMM (prefill)", "llama.cpp", "repacked", REPACK, "ggml_gemm_q4_0_4x8_q8_0", needs=frozenset({"i8mm"})),
    LoopSpec("Q8_0 GEMV (decode)", "llama.cpp", "repacked", REPACK, "ggml_gemv_q8_0_4x4_q8_0", without=frozenset({"i8mm"})),
    LoopSpec("Q8_0 GEMV (decode)", "llama.cpp", "repacked", REPACK, "ggml_gemv_q8_0_4x8_q8_0", needs=frozenset({"i8mm"})),
    LoopSpec("Q8_0 GEMM (prefill)", "llama.cpp", "repacked", REPACK, "ggml_gemm_q8_0_4x4_q8_0", without=frozenset({"i8mm"})),
    LoopSpec("Q8_0 GEMM (prefill)", "llama.cpp", "repacked", REPACK, "ggml_gemm_q8_0_4x8_q8_0", needs=frozenset({"i8mm"})),
    # K-quants: repacked at load into 8 interleaved rows (8x4 with dotprod, 8x8 with i8mm), the innermost loop
    # that multiplies (a super-block's sub-blocks; the per-256 scale unpacking outside it is not counted)
    *(LoopSpec(f"{t} {op}", "llama.cpp", "repacked", REPACK, f"ggml_{fn}_{t.replace('Q', 'q')}_{il}_q8_K", **req)
      for t in ("Q4_K", "Q5_K", "Q6_K") for op, fn in (("GEMV (decode)", "gemv"), ("GEMM (prefill)", "gemm"))
      for il, req in (("8x4", {"without": frozenset({"i8mm"})}), ("8x8", {"needs": frozenset({"i8mm"})}))),
    # A BF16 GGUF: ggml_vec_dot_bf16 has no NEON path (fp32 products added one by one in double); F16 is the
    # format llama.cpp runs fast on ARM (fp16 FMAs).
    LoopSpec("bf16 GEMV (decode and prefill)", "llama.cpp", "BF16 vec_dot", VEC, "ggml_vec_dot_bf16", "mul"),
    LoopSpec("bf16 GEMV (decode and prefill)", "llama.cpp", "F16 vec_dot", VEC, "ggml_vec_dot_f16", "float"),
    LoopSpec("fp32 GEMV", "llama.cpp", "vec_dot", VEC, "ggml_vec_dot_f32", "float"),
    # Flash attention with its default f16 cache: a dot per key, then V added into an fp16 accumulator.
    LoopSpec("attention QK, D=64", "llama.cpp", "f16 cache", VEC, "ggml_vec_dot_f16", "float"),
    LoopSpec("attention QK, D=128", "llama.cpp", "f16 cache", VEC, "ggml_vec_dot_f16", "float"),
    LoopSpec("attention P.V, D=64", "llama.cpp", "f16 cache", "ours:llama_cpp_loops.cpp", "est_llama_vec_mad_f16", "float"),
    LoopSpec("attention P.V, D=128", "llama.cpp", "f16 cache", "ours:llama_cpp_loops.cpp", "est_llama_vec_mad_f16", "float"),
    # the same loops beside our BFMMLA rows (cores with bf16), so those rows compare too
    *(LoopSpec(f"attention {op}, D={d}, BFMMLA", "llama.cpp", "f16 cache", src, fn, "float", needs=frozenset({"bf16"}))
      for op, src, fn in (("QK", VEC, "ggml_vec_dot_f16"), ("P.V", "ours:llama_cpp_loops.cpp", "est_llama_vec_mad_f16"))
      for d in (64, 128)),
]


def applies(spec: LoopSpec, features: frozenset) -> bool:
    return spec.needs <= features and not (spec.without & features)


def llama_ggml_dir(path: Path) -> Path:
    """The ggml/ folder of a llama.cpp checkout, of llama-cpp-python's sdist (vendor/llama.cpp), or itself."""
    for cand in (path / "ggml", path / "vendor" / "llama.cpp" / "ggml", path):
        if (cand / "src" / "ggml-cpu" / QUANTS).is_file():
            return cand
    raise SystemExit(f"no llama.cpp ggml sources under {path} (want ggml/src/ggml-cpu/{QUANTS})")


def llama_source(spec: LoopSpec, ggml: Path) -> tuple[Path, list[Path]]:
    """(source file, include folders) of a llama.cpp loop."""
    includes = [ggml / "include", ggml / "src", ggml / "src" / "ggml-cpu"]
    if spec.source.startswith("ours:"):
        return OUR_SOURCES / spec.source[len("ours:"):], includes
    return ggml / "src" / "ggml-cpu" / spec.source, includes

"""The ARM cycle estimator (tools/estimate, a developer tool outside the package) end to end on one of our loops: clang compiles gemv_loops.cpp for
Neoverse V1, the loop finder picks the bf16 GEMV's inner loop out of the assembly, llvm-mca times it, and the
command prints a plausible cycles-per-weight figure. Needs clang and llvm-mca (.ci/run installs llvm-19); a
missing tool fails, it does not skip."""
from __future__ import annotations

import re
import subprocess
import sys

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # the tool is no package of the install: its folder, not the repo root

from estimate import asm_loop  # noqa: E402
from estimate.cpus import by_key  # noqa: E402
from estimate.projection import MODELS, Machine, attention_loop, prefill_loop, project  # noqa: E402
from estimate.run import run_all  # noqa: E402


def test_bf16_gemv_loop_is_found_and_timed():
    (est,) = run_all(by_key(["neoverse-v1"]), None, only="bf16 GEMV")
    assert not est.error, est.error
    assert est.macs == 4 * 32, "one trip: 4 weight rows x 32 bf16 (16 BFDOTs)"
    # Neoverse V1 issues 4 128-bit BFDOTs a cycle at best: 0.03 cycles per weight; a spilled loop would be >0.3
    assert 0.03 <= est.per_mac <= 0.3, est


def test_tile_layout_loops_are_timed_a_whole_block_a_trip():
    """The ARM tile layout's loops (quant_tile_loops.cpp): a trip is one block of 32 for the whole register tile,
    16 rows x 1 token for decode, 8 rows x 4 tokens on SMMLA (V1 has i8mm), 16 x 4 on SDOT (the A76 has none)."""
    macs = {"Q8_0 GEMV (decode)": {"neoverse-v1": 16 * 32, "cortex-a76": 16 * 32},
            "Q8_0 GEMM (prefill)": {"neoverse-v1": 8 * 4 * 32, "cortex-a76": 16 * 4 * 32}}
    for est in run_all(by_key(["neoverse-v1", "cortex-a76"]), None, only="Q8_0 G"):
        if est.spec.row in macs:
            assert not est.error, est.error
            assert est.macs == macs[est.spec.row][est.cpu.key], est
            assert 0.005 <= est.per_mac <= 0.2, est


def test_bfmmla_panel_block_is_timed_a_whole_block_a_trip():
    """The BFMMLA tiles over the packed bf16 panels (packed_loops.cpp): a trip is one k-quad of the block, 8 rows x
    10 tokens x 4 k = 20 BFMMLAs of 16 MACs, faster per MAC than the BFDOT token block it replaces for prefill;
    V1 issues at most 4 BFMMLAs a cycle (0.0156 cycles/MAC)."""
    ests = {e.spec.row: e for e in run_all(by_key(["neoverse-v1"]), None, only="bf16 packed panels")}
    mmla, block = ests["bf16 packed panels, BFMMLA"], ests["bf16 packed panels, token block"]
    assert not mmla.error and not block.error, (mmla.error, block.error)
    assert mmla.macs == 8 * 10 * 4, mmla
    assert 0.0156 <= mmla.per_mac < block.per_mac, (mmla, block)


def test_bfmmla_attention_blocks_are_timed_a_whole_block_a_trip():
    """The BFMMLA attention tiles (attention_loops.cpp, core/attention_bfmmla.h) on cores with bf16: a QK trip is
    8 rows x 8 keys x 8 d, a P.V trip 4 rows x 16 columns x 8 keys (32 BFMMLAs of 16 MACs), faster per MAC than the
    BFDOT loops a bf16 cache ran before; V1 issues at most 4 BFMMLAs a cycle (0.0156 cycles/MAC). The Cortex-A76
    has no bf16: no BFMMLA rows there."""
    ests = {(e.cpu.key, e.spec.row): e for e in run_all(by_key(["neoverse-v1", "cortex-a76"]), None, only="D=128")}
    for op in ("QK", "P.V"):
        mmla, vector = ests[("neoverse-v1", f"attention {op}, D=128, BFMMLA")], ests[("neoverse-v1", f"attention {op}, D=128")]
        assert not mmla.error and not vector.error, (mmla.error, vector.error)
        assert mmla.macs == 32 * 16, mmla
        assert 0.0156 <= mmla.per_mac < vector.per_mac, (mmla, vector)
        assert ("cortex-a76", f"attention {op}, D=128, BFMMLA") not in ests
        assert not ests[("cortex-a76", f"attention {op}, D=128")].error


def test_matrix_instructions_count_their_multiply_accumulates():
    assert asm_loop.macs_of("bfmmla v0.4s, v1.8h, v2.8h", "float") == 16  # 2x4 by 4x2
    assert asm_loop.macs_of("bfdot v0.4s, v1.8h, v2.8h", "float") == 8
    assert asm_loop.macs_of("bfmmla z0.s, z1.h, z2.h", "float", sve_bits=256) == 32
    assert asm_loop.macs_of("smmla v0.4s, v1.16b, v2.16b", "int") == 32


def test_bf16_prefill_runs_bfmmla_where_the_core_has_bf16():

    assert prefill_loop("bf16", "dense", frozenset({"bf16", "i8mm"})) == "bf16 packed panels, BFMMLA"
    assert prefill_loop("bf16", "dense", frozenset()) == "dense"  # Cortex-A76, M1: no bf16, no packing
    assert prefill_loop("Q8_0", "tiles", frozenset({"bf16"})) == "tiles"


def test_bf16_attention_runs_bfmmla_where_the_core_has_bf16():

    assert attention_loop("attention QK, D=64", frozenset({"bf16", "i8mm"})) == "attention QK, D=64, BFMMLA"
    assert attention_loop("attention P.V, D=128", frozenset()) == "attention P.V, D=128"  # A76, M1: the vector loops


def test_command_prints_cycles_per_weight():
    out = subprocess.run([sys.executable, "-m", "tools.estimate", "--cpu", "neoverse-v1", "--only", "bf16 GEMV"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    row = re.search(r"^\| bf16 GEMV \(decode and prefill\) \| ([\d.]+) \|", out.stdout, re.M)
    assert row and float(row.group(1)) > 0, out.stdout


def test_loop_finder_takes_the_hot_path_of_a_nested_loop():
    asm = """
f:
    mov x0, xzr
.LBB0_1:
    mov x1, xzr
.LBB0_2:
    sdot v0.4s, v1.16b, v2.16b
    sdot v3.4s, v4.16b, v5.16b
    cbz x3, .LBB0_4
    prfm pldl2keep, [x2]
.LBB0_4:
    add x1, x1, #1
    cmp x1, #8
    b.ne .LBB0_2
    add x0, x0, #1
    cmp x0, x4
    b.lt .LBB0_1
    ret
.Lfunc_end0:
"""
    loop = asm_loop.hot_loop(asm, "f", "int")
    assert loop.macs == 32
    assert loop.lines[0].startswith("sdot") and loop.lines[-1].startswith("b.ne")
    assert not any(l.startswith("prfm") for l in loop.lines), "the shortest trip skips the rare branch"


def test_projection_is_a_roofline_of_bytes_and_cycles():

    smol = MODELS[0]
    assert smol.weights == 134_479_872  # SmolLM2-135M's projections + tied embedding as the output head
    m = Machine("test", "neoverse-v1", threads=2, ghz=2.0, bandwidth_gbs=50)
    fast = project(smol, "bf16", m, gemv_cpm=0.001, gemm_cpm=0.05, attn_cpm=0.001, context=0, prompt=0)
    assert fast.decode_bound == "memory" and abs(fast.decode_tok_s - 50e9 / (2 * smol.weights)) < 1e-6
    assert abs(fast.prefill_tok_s - 4e9 / (0.05 * smol.weights)) < 1e-6
    slow = project(smol, "Q4_0", m, gemv_cpm=1.0, gemm_cpm=1.0, attn_cpm=1.0, context=0, prompt=0)
    assert slow.decode_bound == "compute" and abs(slow.decode_tok_s - 4e9 / smol.weights) < 1e-6

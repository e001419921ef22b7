"""The quantized linear (kernels/csrc/core/quant_linear.cpp) on every block-dot path of vec/qdot.h, and the tile
layout (quant_tiles.cpp) on VNNI, emulated AMX-INT8 tiles and, on a host with them, the real ones:
quant_driver.cpp built natively (AVX2, which AVX-512 machines also run, with VNNI where the host has it, and scalar) and cross-compiled for
AArch64 plain NEON, NEON dotprod and NEON i8mm (SMMLA tiles; gcc, and clang like macOS), run under qemu -cpu max.
A build with i8mm needs a CPU with it (kernels/_loader.py refuses it at load otherwise), so it is not run on a
CPU model without it. The driver checks every weight kind and dtype against a plain loop of the same math, rows bit-identical
whatever M or the thread split, and row dequantization exact. A missing toolchain fails, it does not skip.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import llmchat.kernels as K
from driver_builds import CSRC, QEMU, assert_variant_passed, build_all_variants

pytestmark = pytest.mark.slow  # compiles and runs the driver for every variant (docs/development.md)

SOURCES = [str(Path(__file__).with_name("quant_driver.cpp")),
           *(str(CSRC / "core" / name) for name in ("quant_linear.cpp", "quant_tiles.cpp", "quant_tiles_super.cpp", "quant_tiles_neon.cpp", "amx_linear.cpp",
                                                     "elementwise.cpp"))]  # + serial_runtime
QEMU_MAX = [*QEMU, "-cpu", "max"]  # every optional Armv8 feature (dotprod, i8mm, bf16), whatever qemu's default

AVX512_VNNI = ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
# name: (compiler, flags, runner prefix, quant_isa_name() the driver must report; None: the extension's)
VARIANTS = {
    "native": ("g++", ["-march=native"], [], None),
    "avx2": ("g++", ["-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    # vpdpbusd for maddubs + madd: the same int32 lanes, so the same bits
    "avx512+vnni": ("g++", AVX512_VNNI, [], "avx2+vnni"),
    "avx-vnni": ("g++", ["-mavx2", "-mfma", "-mf16c", "-mavxvnni"], [], "avx2+vnni"),
    "scalar": ("g++", ["-DLLMCHAT_FORCE_SCALAR"], [], "scalar"),
    # the tile layout (core/quant_tiles.cpp) on VNNI alone, the path of an AVX512-VNNI CPU without AMX, and on
    # an emulation of the AMX-INT8 tiles, which runs anywhere on x86
    "tiles vnni": ("g++", [*AVX512_VNNI], [], "avx2+vnni"),
    # (runs of token pairs of 64 KB of activations: a 130-token call at K = 512 takes two)
    "tiles amx (emulated)": ("g++", [*AVX512_VNNI, "-DLLMCHAT_EMULATE_AMX", "-DLLMCHAT_SUPER_ACT_BYTES=65536"], [],
                             "avx2+vnni"),
    "neon": ("aarch64-linux-gnu-g++", ["-march=armv8-a"], QEMU_MAX, "neon"),  # widening multiplies, no SDOT
    "neon+dotprod": ("aarch64-linux-gnu-g++", ["-march=armv8.2-a+dotprod"], QEMU_MAX, "neon+dotprod"),
    # SMMLA 2x2 tiles for every M (vec/qdot_neon_i8mm.h)
    "neon+i8mm+bf16": ("aarch64-linux-gnu-g++", ["-march=armv8.6-a+bf16+i8mm+dotprod"], QEMU_MAX, "neon+dotprod+i8mm"),
    # clang is the compiler family of macOS: Apple M1 is Armv8.5 with dotprod, M2 and later Armv8.6, which
    # implies i8mm (with gcc too)
    "neon+dotprod (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.5-a+dotprod"], QEMU_MAX,
                             "neon+dotprod"),
    "neon+i8mm (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.6-a+dotprod"], QEMU_MAX,
                          "neon+dotprod+i8mm"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("quant-isa-builds"), SOURCES, VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_quant_linear_path_matches_plain_loop(results, name):
    assert_variant_passed(results, name, VARIANTS, native_isa=K.quant_isa)


def _digest(proc) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("digest="))


@pytest.mark.parametrize("name", ["avx512+vnni", "avx-vnni"])
def test_vnni_gives_the_avx2_paths_bits(results, name):
    """vpdpbusd sums the same int32 lanes as maddubs + madd, so every output of the driver has the same bits."""
    assert_variant_passed(results, name, VARIANTS, native_isa=K.quant_isa)
    assert_variant_passed(results, "avx2", VARIANTS, native_isa=K.quant_isa)
    assert _digest(results[name]) == _digest(results["avx2"])


def _line(proc, key: str) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith(key + "="))


TILE_PATHS = {"tiles vnni": "tiles=avx512+vnni", "tiles amx (emulated)": "tiles=avx512+vnni+amx (emulated)"}


@pytest.mark.parametrize("name", list(TILE_PATHS))
def test_tile_layout_runs_its_path(results, name):
    """A build without AMX runs the tile layout on VNNI for every M; the emulated tiles take whole 16-token tiles."""
    assert_variant_passed(results, name, VARIANTS, native_isa=K.quant_isa)
    assert _line(results[name], "tiles") == TILE_PATHS[name]


def test_the_tile_paths_give_the_same_bits(results):
    """Every output of the tiled checks has the same bits on VNNI alone, on emulated tiles and, where this host
    has AMX-INT8, on the real tiles of the native build: the paths never change a row, whatever M."""
    for name in TILE_PATHS:
        assert_variant_passed(results, name, VARIANTS, native_isa=K.quant_isa)
    digests = {name: _line(results[name], "tiles_digest") for name in TILE_PATHS}
    assert_variant_passed(results, "native", VARIANTS, native_isa=K.quant_isa)
    native = results["native"]
    if _line(native, "tiles") != "tiles=":  # the extension's build has the layout (x86 with AVX512-VNNI)
        digests["native"] = _line(native, "tiles_digest")
        amx_int8 = "amx_int8" in Path("/proc/cpuinfo").read_text().split()
        assert _line(native, "tiles") == ("tiles=avx512+vnni+amx" if amx_int8 else "tiles=avx512+vnni")
    assert len(set(digests.values())) == 1, digests

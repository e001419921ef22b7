"""The ARM tile layout of quantized weights (kernels/csrc/core/quant_tiles_neon.h) on every path it has:
quant_neon_tiles_driver.cpp built natively (the scalar loop, which any non-ARM build has) and cross-compiled for
AArch64 plain NEON (widening multiplies), dotprod (SDOT, run as a Cortex-A76) and i8mm (SMMLA; gcc, and clang
like macOS), run under qemu. The driver checks every output bit for bit against the header's float steps and
within tolerance of the math in double, rows against M = 1 calls and other splits, and row dequantization;
here every build must also print the same digest of all its outputs: no path, core or compiler changes a bit.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from driver_builds import CSRC, QEMU, assert_variant_passed, build_all_variants

pytestmark = pytest.mark.slow  # compiles and runs the driver for every variant (docs/development.md)

SOURCES = [str(Path(__file__).with_name("quant_neon_tiles_driver.cpp")),
           *(str(CSRC / "core" / name) for name in ("quant_tiles_neon.cpp", "quant_linear.cpp", "quant_tiles.cpp", "quant_tiles_super.cpp",
                                                     "amx_linear.cpp", "elementwise.cpp"))]
QEMU_MAX = [*QEMU, "-cpu", "max"]
QEMU_A76 = [*QEMU, "-cpu", "cortex-a76"]  # dotprod, no i8mm

# name: (compiler, flags, runner prefix, quant_tiles_neon_isa() the driver must report)
VARIANTS = {
    "native": ("g++", ["-march=native"], [], None),
    # with -mfma: std::fma is then the instruction, as on every ARM core (an x86 build without FMA has other
    # bits, never runs this layout, and still passes its own checks)
    "scalar": ("g++", ["-DLLMCHAT_FORCE_SCALAR", "-mfma"], [], "scalar"),
    "neon": ("aarch64-linux-gnu-g++", ["-march=armv8-a"], QEMU_MAX, "neon"),
    "neon+dotprod": ("aarch64-linux-gnu-g++", ["-march=armv8.2-a+dotprod"], QEMU_A76, "neon+dotprod"),
    "neon+i8mm": ("aarch64-linux-gnu-g++", ["-march=armv8.6-a+bf16+i8mm+dotprod"], QEMU_MAX, "neon+i8mm"),
    "neon+dotprod (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.5-a+dotprod"], QEMU_A76,
                             "neon+dotprod"),
    "neon+i8mm (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.6-a+dotprod"], QEMU_MAX, "neon+i8mm"),
}


def _native_isa() -> str:
    import platform
    return "neon+i8mm" if platform.machine() in ("aarch64", "arm64") else "scalar"  # an x86 build has the loop


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("quant-neon-tiles"), SOURCES, VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_tile_layout_path_matches_its_float_steps(results, name):
    if name == "native" and _native_isa() != "scalar":
        pytest.skip("an ARM host's native path depends on its cores")
    assert_variant_passed(results, name, VARIANTS, native_isa=_native_isa)


def test_every_path_and_build_gives_the_same_bits(results):
    digests = {}
    for name in VARIANTS:
        if name in results and results[name].returncode == 0:
            digests[name] = next(line for line in results[name].stdout.splitlines() if line.startswith("digest="))
    assert {"neon", "neon+dotprod", "neon+i8mm", "neon+i8mm (clang)"} <= set(digests), digests
    assert len(set(digests.values())) == 1, digests

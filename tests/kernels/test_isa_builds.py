"""Every ISA header, proven on this x86-64 machine: the torch-free core + core_driver.cpp is compiled for
AVX-512(+BF16), AVX2, scalar, and cross-compiled for AArch64 NEON(+BF16) (with gcc, and with clang like
macOS) and run under qemu-aarch64 (the builds: driver_builds.py).
The driver checks each kernel against the scalar reference. A missing toolchain is a failure, not a skip:
CI installs g++, g++-aarch64-linux-gnu, clang and qemu-user (Debian/Ubuntu packages).
"""
from __future__ import annotations

import platform
from pathlib import Path

import pytest

from driver_builds import CSRC, QEMU, assert_variant_passed, build_all_variants

pytestmark = pytest.mark.slow  # compiles and runs the driver for every variant (docs/development.md)

CORE = ["attention.cpp", "amx_linear.cpp", "norm.cpp", "rotary.cpp", "elementwise.cpp"]  # what core_driver.cpp checks (+ the AMX grant)
SOURCES = [str(Path(__file__).with_name("core_driver.cpp")), *(str(CSRC / "core" / name) for name in CORE)]

# name: (compiler, flags, runner prefix, isa string the driver must report)
VARIANTS = {
    "native": ("g++", ["-march=native"], [], None),  # must report the same path as the built extension
    "avx512": ("g++", ["-mavx512f", "-mavx512bw", "-mavx2", "-mfma", "-mf16c"], [], "avx512"),
    "avx2": ("g++", ["-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    "scalar": ("g++", ["-DLLMCHAT_FORCE_SCALAR"], [], "scalar"),
    "neon+bf16": ("aarch64-linux-gnu-g++", ["-march=armv8.6-a+bf16"], QEMU, "neon+bf16"),
    "neon": ("aarch64-linux-gnu-g++", ["-march=armv8-a"], QEMU, "neon"),
    # clang is the compiler family of macOS (Apple silicon builds with Apple clang): the arm64 path must
    # compile and pass with it too, not only with gcc
    "neon+bf16 (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.6-a+bf16"], QEMU, "neon+bf16"),
    # no BFDOT (Cortex-A76, Neoverse N1, Apple M1): bf16 through the widened fallback, with both compilers
    "neon (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8-a"], QEMU, "neon"),
    # bf16 attention on AMX tiles (core/attention_amx.h): on an emulation of the tiles anywhere on x86, and on
    # the real ones where the host has them
    "amx (emulated)": ("g++", ["-DLLMCHAT_EMULATE_AMX", "-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    "amx": ("g++", ["-march=sapphirerapids"], [], "avx512+bf16"),
}
# the attention path each variant must report (the rest: "vector"; native: what this CPU grants); ARM with bf16
# runs every bf16 row on BFMMLA tiles (core/attention_bfmmla.h), plain NEON keeps the vector path
ATTENTION = {"amx (emulated)": "amx", "amx": "amx", "neon+bf16": "bfmmla", "neon+bf16 (clang)": "bfmmla",
             "neon": "vector", "neon (clang)": "vector"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("isa-builds"), SOURCES, VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_isa_path_matches_scalar_reference(results, name):
    assert_variant_passed(results, name, VARIANTS)
    if name == "native":
        x86_amx = platform.machine() in ("x86_64", "AMD64") and "amx_bf16" in Path("/proc/cpuinfo").read_text().split()
        arm_bf16 = "isa=neon+bf16\n" in results[name].stdout  # an ARM host with bf16 (the ARM job)
        want = "amx" if x86_amx else "bfmmla" if arm_bf16 else "vector"
    else:
        want = ATTENTION.get(name, "vector")
    assert f"attention={want}\n" in results[name].stdout


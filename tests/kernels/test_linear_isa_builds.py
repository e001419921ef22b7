"""The small-M linear core (kernels/csrc/core/gemv.cpp, packed_linear.cpp) on every ISA path: gemv_driver.cpp
built natively (AVX-512+BF16 / AVX-512 / AVX2 / scalar) and cross-compiled for AArch64 NEON(+BF16), run under
qemu -cpu max, checked against a plain loop (dense fp32/fp16/bf16 and packed bf16) with packed rows
bit-identical whatever M or the thread split. Each variant must report the panel instance of vec/panel.h it
ran: BFDOT panels for decode and BFMMLA tiles (vec/panel_bfmmla.h) for steps of two or more tokens on NEON+BF16,
VDPBF16PS where AVX512-BF16 is there, the portable panel elsewhere, and AMX tiles (core/amx_linear.cpp) on an
emulation of the tiles everywhere on x86 and on the real tiles where the host has them. On NEON+BF16 the driver's
M = 1 vs M = 2..17 comparisons over random shapes and its signed-zero case of a lone last k-pair prove the
BFMMLA tiles take the BFDOT chain's operations, bit for bit. A missing toolchain fails."""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

import llmchat.kernels as K
from driver_builds import COMMON, CSRC, QEMU, assert_variant_passed, build_all_variants
from test_isa_builds import VARIANTS

pytestmark = pytest.mark.slow  # compiles and runs the driver for every variant (docs/development.md)

# What gemv_driver.cpp calls: the small-M linear (gemv.cpp, packed_linear.cpp, amx_linear.cpp for the AMX tiles) and
# the core's runtime helpers (elementwise.cpp: serial_runtime, isa_name). The other core sources, which it never
# calls, are not compiled for its variants (a source it needs and lacks is a link error: the test fails).
SOURCES = [str(Path(__file__).with_name("gemv_driver.cpp")),
           *(str(CSRC / "core" / name) for name in ("gemv.cpp", "packed_linear.cpp", "amx_linear.cpp", "elementwise.cpp"))]
QEMU_MAX = [*QEMU, "-cpu", "max"]  # bf16 (BFDOT) whatever qemu's default CPU
LINEAR_VARIANTS = {name: (cc, flags, QEMU_MAX if runner else runner, isa)
                   for name, (cc, flags, runner, isa) in VARIANTS.items()}
# variant: the panel instance it must run (None: the one the built extension runs)
PACKED = {"native": None, "avx512": "scalar", "avx2": "scalar", "scalar": "scalar", "neon+bf16": "neon+bf16+bfmmla",
          "neon": "scalar", "neon (clang)": "scalar", "neon+bf16 (clang)": "neon+bf16+bfmmla", "neon+bf16 (armv8.2)": "neon+bf16+bfmmla",
          "amx (emulated)": "amx (emulated)", "amx": "avx512+bf16+amx"}
LINEAR_VARIANTS.update({
    # BFMMLA is FEAT_BF16's, not i8mm's: a build with bf16 alone runs the tiles too
    "neon+bf16 (armv8.2)": ("aarch64-linux-gnu-g++", ["-march=armv8.2-a+bf16"], QEMU_MAX, "neon+bf16"),
    # the tile kernel's blocking, tails and zero padding, on an emulation that faults where the hardware would
    "amx (emulated)": ("g++", ["-DLLMCHAT_EMULATE_AMX", "-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    "amx": ("g++", ["-march=sapphirerapids"], [], "avx512+bf16"),  # the real tiles, on a host that has them
})
NEON_BF16 = {"neon+bf16", "neon+bf16 (clang)", "neon+bf16 (armv8.2)"}
AVX512_BF16_FLAGS = [["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16"], ["-march=sapphirerapids"]]


def native_packed_isa() -> str:
    return K.packed_isa()


def step_paths(name: str) -> tuple[str, str]:
    """What the variant's driver must say a 1-token and a 2-token step run (packed_step_path)."""
    isa = PACKED[name] or native_packed_isa()
    if "amx" in isa:
        return "amx", "amx"
    return "panels", "bfmmla" if isa.endswith("+bfmmla") else "panels"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("gemv-isa-builds"), SOURCES, LINEAR_VARIANTS)


@pytest.mark.parametrize("name", list(LINEAR_VARIANTS))
def test_linear_small_m_matches_plain_loop(results, name):
    assert_variant_passed(results, name, LINEAR_VARIANTS)
    assert f"packed={PACKED[name] or native_packed_isa()}\n" in results[name].stdout
    m1, m2 = step_paths(name)
    assert f"packed_m1={m1}\npacked_m2={m2}\n" in results[name].stdout
    if name in NEON_BF16:  # decode on BFDOT panels, every longer step on BFMMLA tiles
        assert (m1, m2) == ("panels", "bfmmla")


@pytest.mark.parametrize("compiler", [["aarch64-linux-gnu-g++"], ["clang++", "--target=aarch64-linux-gnu"]], ids=lambda c: c[0])
def test_neon_bf16_panels_compile_to_bfmmla_and_bfdot(tmp_path, compiler):
    """With bf16 the packed panels compile to BFMMLA tiles beside the BFDOT panel (gcc and clang, bf16 alone: no
    i8mm needed); a plain Armv8 build has neither."""
    def asm(march: str) -> str:
        out = tmp_path / f"packed-{march}.s"
        built = subprocess.run([*compiler, *COMMON, f"-march={march}", "-S", str(CSRC / "core" / "packed_linear.cpp"),
                                "-o", str(out)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
        return out.read_text()
    with_bf16, plain = asm("armv8.2-a+bf16"), asm("armv8-a")
    assert "bfmmla\t" in with_bf16.replace(" ", "\t") and "bfdot\t" in with_bf16.replace(" ", "\t")
    assert "bfmmla" not in plain and "bfdot" not in plain


@pytest.mark.parametrize("flags", AVX512_BF16_FLAGS, ids=" ".join)
def test_avx512_bf16_panels_compile(tmp_path, flags):
    """The VDPBF16PS panel compiles on any x86 host, also one that cannot run it (the native variant runs it
    where the CPU has AVX512-BF16)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 flags")
    built = subprocess.run(["g++", *COMMON, *flags, "-S", str(CSRC / "core" / "packed_linear.cpp"),
                            "-o", str(tmp_path / "packed.s")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "vdpbf16ps" in (tmp_path / "packed.s").read_text()


def test_amx_tiles_compile(tmp_path):
    """The AMX tile kernel compiles to TDPBF16PS on any x86 host with gcc and clang, also one that cannot run
    it (the "amx" variant runs it where the host has the tiles)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 flags")
    for compiler in ("g++", "clang++"):
        asm = tmp_path / f"amx-{compiler}.s"
        built = subprocess.run([compiler, *COMMON, "-march=sapphirerapids", "-S", str(CSRC / "core" / "amx_linear.cpp"),
                                "-o", str(asm)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
        text = asm.read_text()
        assert "tdpbf16ps" in text and "ldtilecfg" in text and "tilerelease" in text, compiler

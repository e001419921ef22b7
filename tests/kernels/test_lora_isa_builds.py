"""The multi-adapter LoRA core (kernels/csrc/core/lora.cpp) on every ISA path: lora_driver.cpp built natively
(AVX-512+BF16 / AVX-512 / AVX2 / scalar) and cross-compiled for AArch64 NEON(+BF16), run under qemu, checked
against the scalar reference over random ranks, slices (some untargeted), slots and segments. A missing
toolchain fails."""
from __future__ import annotations

from pathlib import Path

import pytest

import llmchat.kernels as K

from driver_builds import CSRC, assert_variant_passed, build_all_variants
from test_isa_builds import VARIANTS

pytestmark = pytest.mark.slow  # compiles and runs the driver for every variant (docs/development.md)

# lora.cpp, plus elementwise.cpp for the core's runtime helpers (serial_runtime, isa_name) and amx_linear.cpp for
# the AMX grant
SOURCES = [str(Path(__file__).with_name("lora_driver.cpp")),
           *(str(CSRC / "core" / n) for n in ("lora.cpp", "elementwise.cpp", "amx_linear.cpp"))]
# the bf16 LoRA path each variant must report (the rest: "vector"; native: the built extension's)
LORA = {"amx (emulated)": "amx (emulated)", "amx": "amx", "neon+bf16": "bfmmla", "neon+bf16 (clang)": "bfmmla"}


# The tile backends under AddressSanitizer too: a read past a rank range, a panel or a row can give right values
# (its partner operand is zero, or its lanes are never stored), so only the sanitizer sees it.
ASAN = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
LORA_VARIANTS = {
    **VARIANTS,
    "amx (emulated, asan)": ("g++", [*VARIANTS["amx (emulated)"][1], *ASAN], [], "avx2"),
    "neon+bf16 (asan)": ("aarch64-linux-gnu-g++", [*VARIANTS["neon+bf16"][1], *ASAN], VARIANTS["neon+bf16"][2], "neon+bf16"),
}
LORA["amx (emulated, asan)"] = "amx (emulated)"
LORA["neon+bf16 (asan)"] = "bfmmla"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    # LeakSanitizer cannot run under qemu-user; the address checks do
    return build_all_variants(tmp_path_factory.mktemp("lora-isa-builds"), SOURCES, LORA_VARIANTS,
                              env={"ASAN_OPTIONS": "detect_leaks=0"})


@pytest.mark.parametrize("name", list(LORA_VARIANTS))
def test_lora_apply_matches_scalar_reference(results, name):
    assert_variant_passed(results, name, LORA_VARIANTS)
    want = K.lora_path() if name == "native" else LORA.get(name, "vector")
    assert f"lora={want}\n" in results[name].stdout

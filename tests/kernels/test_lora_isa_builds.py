"""The multi-adapter LoRA core (kernels/csrc/core/lora.cpp) on every ISA path: lora_driver.cpp built natively
(AVX-512+BF16 / AVX-512 / AVX2 / scalar) and cross-compiled for AArch64 NEON(+BF16), run under qemu, checked
against the scalar reference over random ranks, slices (some untargeted), slots and segments. A missing
toolchain fails."""
from __future__ import annotations

from pathlib import Path

import pytest

import llmchat.kernels as K

from test_isa_builds import CSRC, VARIANTS, assert_variant_passed, build_all_variants

# lora.cpp, plus elementwise.cpp for the core's runtime helpers (serial_runtime, isa_name) and amx_linear.cpp for
# the AMX grant
SOURCES = [str(Path(__file__).with_name("lora_driver.cpp")),
           *(str(CSRC / "core" / n) for n in ("lora.cpp", "elementwise.cpp", "amx_linear.cpp"))]
# the bf16 LoRA path each variant must report (the rest: "vector"; native: the built extension's)
LORA = {"amx (emulated)": "amx (emulated)", "amx": "amx", "neon+bf16": "bfmmla", "neon+bf16 (clang)": "bfmmla"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("lora-isa-builds"), SOURCES)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_lora_apply_matches_scalar_reference(results, name):
    assert_variant_passed(results, name)
    want = K.lora_path() if name == "native" else LORA.get(name, "vector")
    assert f"lora={want}\n" in results[name].stdout

"""The small-M linear core (kernels/csrc/core/gemv.cpp) on every ISA path: gemv_driver.cpp built natively
(AVX-512+BF16 / AVX-512 / AVX2 / scalar) and cross-compiled for AArch64 NEON(+BF16), run under qemu,
checked against a plain loop (dense fp32/fp16/bf16 and packed bf16). A missing toolchain fails."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_isa_builds import CSRC, VARIANTS, assert_variant_passed, build_all_variants

SOURCES = [str(Path(__file__).with_name("gemv_driver.cpp")), *sorted(str(p) for p in (CSRC / "core").glob("*.cpp"))]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("gemv-isa-builds"), SOURCES)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_linear_small_m_matches_plain_loop(results, name):
    assert_variant_passed(results, name)

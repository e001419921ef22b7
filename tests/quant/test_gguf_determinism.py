"""Determinism on quantized bases (issue 16): tiny GGUF models of mixed block types and of Q8_0 go through the
same matrix as the dense models (tests/determinism/det_helpers.check_matrix), activations in fp32 and bf16."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "determinism"))

from det_helpers import check_matrix  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch,mix", [("llama", "mixed"), ("qwen3", "q8_0")])
def test_a_request_on_a_gguf_base_gives_the_same_bits_whatever_the_engine_does(arch, mix, dtype, store, tiny_gguf):
    path = store.import_path(tiny_gguf(arch, mix)).path
    check_matrix(path, dtype, None, f"GGUF {arch} {mix} {dtype}")

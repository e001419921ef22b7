"""Issue 16's matrix (det_helpers.check_matrix) on tiny random models of every family, fp32 and bf16, with
LoRA adapters on the requests and around them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "lora"))

from det_helpers import check_matrix  # noqa: E402
from lora_helpers import make_adapter  # noqa: E402
from tiny_models import ARCHS, make_model  # noqa: E402


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir, tmp_path_factory):
    """Two random LoRA adapters per family (built on first use)."""
    made = {}

    def get(arch):
        if arch not in made:
            root = tmp_path_factory.mktemp(f"adapters-{arch}")
            made[arch] = [make_adapter(tiny_model_dir(arch), root / name, seed=seed, r=4)
                          for name, seed in (("a", 1), ("b", 2))]
        return made[arch]
    return get


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_request_gives_the_same_bits_whatever_the_engine_does(arch, dtype, tiny_model_dir, adapter_dirs):
    check_matrix(tiny_model_dir(arch), dtype, adapter_dirs(arch), f"{arch} {dtype}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_same_bits_with_a_sliding_window(dtype, tmp_path_factory):
    """Mistral with a 24-token window: keys before a row's window are masked inside the chunks it walks."""
    folder = make_model(tmp_path_factory.mktemp("mistral-window"), "mistral", sliding_window=24)
    check_matrix(folder, dtype, None, f"mistral window 24 {dtype}")

"""Loading a bf16 model moves every projection's panels into one huge-page backed buffer (the decode
step streams all of them); outputs are unaffected (the fidelity tests run on the same loader)."""
from __future__ import annotations

import pytest

import llmchat.kernels as K
from llmchat.engine.layers.linear import Linear
from model_harness import make_runner
from tiny_models import make_model


@pytest.mark.skipif(not K.packed_native(), reason="bf16 panels need a bf16 pair-dot: AVX512-BF16, AMX or NEON bf16 (packed_native)")
def test_panels_share_one_huge_page_buffer_and_the_kv_cache_is_aligned(tmp_path):
    runner = make_runner(make_model(tmp_path / "m", "llama", tie_word_embeddings=True), backend="kernels",
                         dtype="bfloat16")
    panels = [m.small_m_weight for m in runner.model.modules() if isinstance(m, Linear)]
    assert panels and all(p is not None and p.dim() == 3 for p in panels)
    assert len({p.untyped_storage().data_ptr() for p in panels}) == 1
    runner.allocate_kv_cache(8)
    assert runner.key_caches[0].data_ptr() % (2 << 20) == 0 and not runner.key_caches[0].any()

"""The app's engine manager labels each loaded model with how its weights run (the engine panel shows it):
a GGUF file's quant, or the type quantized at load."""
from __future__ import annotations

from llmchat.tui.app.engines import EngineManager


async def test_a_gguf_model_is_labelled_with_its_quant(store, tiny_gguf, tmp_path):
    model = store.import_path(tiny_gguf("llama", "q8_0"))
    manager = EngineManager(memory_budget_gb=2, kv_cache_gb=0.02, data_dir=store.data_dir)
    loaded = await manager.get(model.name)
    assert manager.metrics()[0][0] == f"{model.name} · Q8_0"
    await loaded.engine.shutdown()


async def test_quantized_at_load_is_labelled(tiny_source, store):
    manager = EngineManager(memory_budget_gb=2, kv_cache_gb=0.02, engine_kwargs={"quantize": "q4_0"},
                            data_dir=store.data_dir)
    loaded = await manager.get(str(tiny_source("qwen2")))
    assert manager.metrics()[0][0].endswith("· q4_0 at load")
    await loaded.engine.shutdown()

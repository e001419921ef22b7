"""One tiny Llama (ChatML template) and two LoRA adapters for the server tests, built once per session."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "lora"))


@pytest.fixture(scope="session")
def served_model(tiny_model_dir, tmp_path_factory):
    """(model folder, adapter a folder, adapter b folder)."""
    from lora_helpers import make_adapter
    model = tiny_model_dir("llama")
    tmp = tmp_path_factory.mktemp("server-lora")
    return model, make_adapter(model, tmp / "a", seed=41), make_adapter(model, tmp / "b", seed=42)


@pytest.fixture(scope="session")
def structured_server(tmp_path_factory):
    """One server with the tiny tool-calling models ("tools": Hermes/Qwen calls, "llama3-tools": Llama 3's JSON
    form) and two thinking ones ("opens-think": its template opens <think>; "model-thinks": the model does)."""
    from server_helpers import ThreadServer, serve_settings
    from structured_models import (LLAMA3_TOOLS_TEMPLATE, MODEL_THINKS_TEMPLATE, OPEN_THINK_TEMPLATE, TOOLS_TEMPLATE,
                                   make_templated_model)

    from llmchat.engine.serve import ModelSpec
    tmp = tmp_path_factory.mktemp("structured")
    specs = [ModelSpec(name, make_templated_model(tmp / name, template)) for name, template in (
        ("tools", TOOLS_TEMPLATE), ("llama3-tools", LLAMA3_TOOLS_TEMPLATE), ("opens-think", OPEN_THINK_TEMPLATE),
        ("model-thinks", MODEL_THINKS_TEMPLATE))]
    with ThreadServer(specs, serve_settings(engine_kwargs={"kv_cache_gb": 0.1})) as server:
        yield server

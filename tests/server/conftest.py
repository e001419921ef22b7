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

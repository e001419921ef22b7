"""What the settings and compare screens offer: the models and adapters a session can use, and a model's defaults."""
from __future__ import annotations

import json
from pathlib import Path

from llmchat.engine.remote import is_remote
from llmchat.engine.store import ModelStore, resolve_model

from .engines import read_generation_defaults


def library_names(data_path: Path, kind: str) -> list[str]:
    """Names of this kind ("model" or "adapter") in the model store's library ([] while it is unavailable)."""
    try:
        return [m.name for m in ModelStore(data_dir=data_path).list() if m.kind == kind]
    except Exception:   # the store is optional here: never let it break the chat
        return []


def known_models(session_models, library: list[str], remote: list[str], default_model: str) -> list[str]:
    """Every model name worth suggesting: sessions' models, the library, remote endpoints' models, the default."""
    names = {m for m in session_models if m}
    names.update(library)
    names.update(remote)
    if default_model:
        names.add(default_model)
    return sorted(names)


def model_defaults(model: str, data_path: Path) -> dict:
    """What an unset sampling field becomes for this model ({} for a remote one: its server decides)."""
    if is_remote(model):
        return {}
    try:
        path = resolve_model(model, data_path) if model else None
    except (FileNotFoundError, ValueError, OSError):
        path = None
    return read_generation_defaults(path)


def template_source(model: str, data_path: Path) -> str:
    """The chat template text of a local model: its folder's template file, or a .gguf file's metadata
    (tokenizer.chat_template, which its library folder's template is made from). "" for remote models or none."""
    if not model or is_remote(model):
        return ""
    gguf = Path(model).expanduser()
    if gguf.suffix.lower() == ".gguf" and gguf.is_file():
        return _gguf_template(gguf)    # read, not imported: looking must not register the file
    try:
        path = resolve_model(model, data_path)
        if not path.is_dir():
            return ""
        jinja = path / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = config.get("chat_template") or ""
        return template if isinstance(template, str) else json.dumps(template)
    except (FileNotFoundError, ValueError, OSError):
        return ""


def _gguf_template(path: Path) -> str:
    # the GGUF reader (torch, gguf: ~2 s): only for a .gguf model
    from llmchat.engine.quant.gguf_tensors import GGUFError, field, open_reader
    try:
        return field(open_reader(path), "tokenizer.chat_template") or ""
    except (GGUFError, OSError):
        return ""


def supports_thinking(model: str, data_path: Path) -> bool:
    """The model's chat template has an enable_thinking switch (SmolLM3, Qwen3; GGUF files too): F3 offers it."""
    return "enable_thinking" in template_source(model, data_path)

"""Offline API: hand over a batch of prompts, get every finished output back in order."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

from .config import EngineConfig
from .llm_engine import LLMEngine
from .metrics import MetricsSnapshot
from .outputs import RequestOutput
from .sampling_params import SamplingParams


def model_folder(model_path) -> Path:
    """A model folder as given; a .gguf file or a library name through the model store's one rule
    (store.resolve_model), so every name that works in `llmchat run` works here."""
    path = Path(model_path).expanduser()
    if path.is_dir():
        return path
    from .store import resolve_model   # the store is a room beside the core, loaded only for such names
    return resolve_model(model_path)


def build_config(model_path, kwargs: dict) -> EngineConfig:
    """EngineConfig from keyword arguments, with a clear error for a misspelt or invalid one (checked before the
    name is resolved, which may register a file)."""
    known = {f.name for f in fields(EngineConfig)} - {"model_path"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"unknown engine option(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    checked = EngineConfig(model_path=Path(model_path), **kwargs)
    draft = None if checked.draft_model is None else model_folder(checked.draft_model)
    return replace(checked, model_path=model_folder(model_path), draft_model=draft)


class LLM:
    """`LLM(model, dtype=..., kv_cache_gb=..., enable_prefix_caching=True, **EngineConfig fields)`; model: a
    folder, a .gguf file (registered in place in the library) or a library name."""

    def __init__(self, model_path, load_progress=None, **kwargs):
        self.engine = LLMEngine(build_config(model_path, kwargs), load_progress)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    def metrics(self) -> MetricsSnapshot:
        return self.engine.metrics_snapshot()

    def load_adapter(self, name: str, path) -> None:
        """Load a PEFT LoRA adapter (folder or model-store name) under `name`; loading a name again
        replaces it. ValueError if it does not fit the model; then nothing changes."""
        self.engine.load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        self.engine.unload_adapter(name)

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 adapter: str | list[str | None] | None = None,
                 on_output: Callable[[int, RequestOutput], None] | None = None) -> list[RequestOutput]:
        """prompts: one prompt or a list; a prompt is text, a list of chat messages, or token ids.

        All prompts are validated before any runs, so a bad one raises ValueError and nothing starts.
        `on_output(index, output)`, if given, is called as each request finishes (e.g. to save results
        as they come, as `llmchat compare` does).
        """
        if isinstance(prompts, str) or _is_single_prompt(prompts):
            prompts = [prompts]
        prompts = list(prompts)
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        adapters = adapter if isinstance(adapter, list) else [adapter] * len(prompts)
        if len(params_list) != len(prompts) or len(adapters) != len(prompts):
            raise ValueError("give one SamplingParams (and adapter) for all prompts or one per prompt")
        for name in dict.fromkeys(a for a in adapters if a is not None):
            self.engine.lora.ensure(name)   # reload an evicted adapter here, not inside a step
        seqs = [self.engine.make_sequence(p, sp, a) for p, sp, a in zip(prompts, params_list, adapters)]
        try:
            for seq in seqs:
                self.engine.add_sequence(seq)   # may fail (e.g. no free adapter slot): abort the added ones
            reported = [False] * len(seqs)
            while any(not s.is_finished for s in seqs):
                self.engine.step()
                for i, seq in enumerate(seqs):
                    if on_output is not None and seq.is_finished and not reported[i]:
                        reported[i] = True
                        on_output(i, self.engine.output_of(seq))
        except BaseException:
            for seq in seqs:
                self.engine.abort(seq.request_id)
            raise
        return [self.engine.output_of(seq) for seq in seqs]


def _is_single_prompt(prompts) -> bool:
    """A chat (list of message dicts) or one list of token ids, as opposed to a list of prompts."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        return False
    first = prompts[0]
    return isinstance(first, dict) or isinstance(first, int)

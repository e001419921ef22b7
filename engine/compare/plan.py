"""What a compare run is made of: the variants (model, or model + adapter) and the shared settings."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from llmchat.engine.sampling_params import SamplingParams
from llmchat.engine.structured_outputs import StructuredOutputs


@dataclass(frozen=True)
class Variant:
    """One column of the report: a model as given on the command line, with or without an adapter."""
    id: str
    model: str
    adapter: str | None = None

    @property
    def adapter_name(self) -> str | None:
        """The name the adapter is loaded under in the engine."""
        return None if self.adapter is None else self.id


@dataclass(frozen=True)
class CompareSettings:
    """Sampling settings shared by every request; request i gets seed `seed + i`."""
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    raw: bool = False                  # send prompts as bare text instead of through the chat template
    dtype: str = "auto"                # engine settings: they change speed, and dtype can change outputs
    kv_cache_gb: float | None = None
    constrain: bool = True             # a prompt's schema constrains its replies; False: they are only scored

    def validate(self) -> None:
        self.sampling_params(0).validate()

    def sampling_params(self, prompt_index: int, schema: str | None = None):
        """Request i's settings; `schema` (JSON text) constrains the reply when the run constrains."""
        constraint = (StructuredOutputs(json=schema, parameter=f"prompt {prompt_index + 1}: schema")
                      if schema is not None and self.constrain else None)
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                              top_k=self.top_k, seed=self.seed + prompt_index, structured_outputs=constraint)

    def output_hash(self) -> str:
        """Hash of everything that decides the outputs (resume key): not kv_cache_gb, which only sizes memory."""
        decisive = {k: v for k, v in asdict(self).items() if k != "kv_cache_gb"}
        if self.constrain:   # the default: runs written before the setting existed keep their hash
            decisive.pop("constrain")
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return asdict(self)


def build_variants(models: list[str], adapters: list[str] | None = None) -> list[Variant]:
    """`--models A B`, `--adapters A=path ...` -> [A, A+path-name, B]: every base model, then its adapters.

    In `--adapters`, MODEL is a `--models` entry as given or its short label (a folder's name).

    ValueError for a malformed `--adapters` item or one naming a model that is not in `--models`.
    """
    if not models:
        raise ValueError("give at least one model with --models")
    used: set[str] = set()
    base_ids = {m: _unique(_label(m), used) for m in dict.fromkeys(models)}   # a model given twice runs once
    by_id = {base_id: m for m, base_id in base_ids.items()}
    by_model: dict[str, list[str]] = {m: [] for m in base_ids}
    for item in adapters or []:
        model, sep, path = item.partition("=")
        if not sep or not model or not path:
            raise ValueError(f"--adapters takes MODEL=ADAPTER_PATH, got {item!r}")
        model = model if model in by_model else by_id.get(model)   # as given, or its short label
        if model is None:
            raise ValueError(f"--adapters {item!r}: model {item.partition('=')[0]!r} is not one of --models "
                             f"({', '.join(base_ids.values())})")
        by_model[model].append(path)
    variants: list[Variant] = []
    for model, base_id in base_ids.items():
        variants.append(Variant(base_id, model))
        for path in dict.fromkeys(by_model[model]):
            variants.append(Variant(_unique(f"{base_id}+{_label(path, force=True)}", used), model, path))
    return variants


def _label(name: str, force: bool = False) -> str:
    """Short column label: a local folder by its name; library names and repo ids as given."""
    path = Path(name.rstrip("/\\")).expanduser()
    if force or path.exists():
        return path.name or name
    return name


def _unique(label: str, used: set[str]) -> str:
    candidate, n = label, 2
    while candidate in used:
        candidate, n = f"{label}#{n}", n + 1
    used.add(candidate)
    return candidate

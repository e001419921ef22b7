"""Load a PEFT LoRA adapter folder into host tensors, checked against the base model before anything changes.

The result (`LoraAdapter`) is self-contained and immutable: per target module, A [r, in] and B [out, r] with
the PEFT scaling already folded into B. Building it touches no engine state, so it can run in the caller's
thread while the engine keeps stepping; the registry swaps it in afterwards.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from .peft_config import read_adapter_config

# A checkpoint that stores a fused projection (Phi-3) gets adapters on it: one A, and a B whose rows are the
# slices' outputs; it is served as one LoRA per slice (the same A, B's rows of that slice), which is exact.
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", *FUSED)
# base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight (an adapter name may sit before .weight)
_KEY = re.compile(r"^base_model\.model\.(model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+))"
                  r"\.lora_([AB])(?:\.[\w-]+)?\.weight$")


@dataclass(frozen=True)
class ModelSpec:
    """What an adapter must fit: projection shapes per (layer, name), the base model's names, the dtype."""
    shapes: dict[tuple[int, str], tuple[int, int]]     # (layer, "q_proj") -> (in_features, out_features)
    names: frozenset[str]                               # lower-case aliases of the base model (folder, repo)
    path: Path | None = None
    dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class LoraAdapter:
    name: str
    path: Path
    content_hash: str                                   # sha256 of config + weights
    modules: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]  # -> (A [r, in], B*scale [out, r])
    nbytes: int

    @property
    def identity(self) -> str:
        """Prefix-cache key: the same name with other weights is another identity."""
        return f"{self.name}@{self.content_hash[:16]}"


def base_model_aliases(model_path: Path, hf_config: dict | None = None) -> frozenset[str]:
    """Names an adapter's base_model_name_or_path may use for this model: folder, Hub repo, config name."""
    path = Path(model_path)
    names = {path.name}
    for part in path.parts:                              # HF cache layout: models--org--name/snapshots/<sha>
        if part.startswith("models--"):
            names.add(part.split("--")[-1])
    declared = (hf_config or {}).get("_name_or_path")
    if declared:
        names.add(_basename(declared))
    return frozenset(n.lower() for n in names if n)


def _basename(name: str) -> str:
    return re.split(r"[/\\]", str(name).rstrip("/\\"))[-1]


def _check_base_model(declared: str | None, spec: ModelSpec, folder: Path) -> None:
    if not declared:
        return
    local = Path(declared).expanduser()
    if spec.path is not None and local.is_dir() and local.resolve() == Path(spec.path).resolve():
        return
    if _basename(declared).lower() not in spec.names:
        raise ValueError(f"{folder}: adapter was trained for {declared!r}, but the loaded model is "
                         f"{' / '.join(sorted(spec.names))} (if that is the same model under another name, set "
                         f"base_model_name_or_path in adapter_config.json)")


def load_lora_adapter(name: str, folder: str | Path, spec: ModelSpec) -> LoraAdapter:
    """Read, validate and convert an adapter. Raises ValueError (nothing is half-loaded)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ValueError(f"adapter folder not found: {folder}")
    config = read_adapter_config(folder)
    _check_base_model(config.base_model_name_or_path, spec, folder)
    weights_path = folder / "adapter_model.safetensors"
    if not weights_path.is_file():
        extra = " (adapter_model.bin pickles are not loaded; re-save with safetensors)" \
            if (folder / "adapter_model.bin").exists() else ""
        raise ValueError(f"{folder}: adapter_model.safetensors is missing{extra}")
    blob = weights_path.read_bytes()
    digest = hashlib.sha256((folder / "adapter_config.json").read_bytes())
    digest.update(blob)
    try:
        tensors = load_safetensors(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{weights_path}: malformed safetensors file ({exc})") from None

    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    module_keys: dict[tuple[int, str], str] = {}
    for key, tensor in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise ValueError(f"{weights_path}: unsupported tensor {key!r} (only LoRA A/B of "
                             f"{', '.join(PROJECTIONS)} are served)")
        module_key, layer, proj, which = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        if proj not in PROJECTIONS:
            raise ValueError(f"{weights_path}: unknown target module {proj!r} in {key!r}")
        where = (layer, proj)
        if _shape(spec, where) is None:
            raise ValueError(f"{weights_path}: {module_key} does not exist in the base model")
        if which in pairs.setdefault(where, {}):
            raise ValueError(f"{weights_path}: duplicate LoRA {which} tensor for {module_key}")
        pairs[where][which] = tensor
        module_keys[where] = module_key
    if not pairs:
        raise ValueError(f"{weights_path}: no LoRA tensors found")

    modules, nbytes = {}, 0
    for where, ab in sorted(pairs.items()):
        module_key = module_keys[where]
        if set(ab) != {"A", "B"}:
            raise ValueError(f"{weights_path}: {module_key} has lora_{''.join(ab)} but not both A and B")
        a, b = ab["A"], ab["B"]
        in_f, out_f = _shape(spec, where)
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != in_f or b.shape[0] != out_f or a.shape[0] != b.shape[1]:
            raise ValueError(f"{weights_path}: {module_key} shapes A {tuple(a.shape)}, B {tuple(b.shape)} do not "
                             f"fit the base projection ({out_f} x {in_f}); was it trained for another model?")
        if not a.is_floating_point() or not b.is_floating_point():
            raise ValueError(f"{weights_path}: {module_key} weights are not floating point")
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            raise ValueError(f"{weights_path}: {module_key} has NaN or infinite weights")
        scale = config.scaling(module_key, a.shape[0])
        a = a.to(spec.dtype).contiguous()
        b = (b.float() * scale).to(spec.dtype).contiguous()
        for part, b_part in _split(spec, where, b):
            modules[part] = (a, b_part)
        nbytes += a.numel() * a.element_size() + b.numel() * b.element_size()
    return LoraAdapter(name=name, path=folder, content_hash=digest.hexdigest(), modules=modules, nbytes=nbytes)


def _shape(spec: ModelSpec, where: tuple[int, str]) -> tuple[int, int] | None:
    """(in, out) of a target module: a projection of the model, or a fused one made of its slices."""
    layer, proj = where
    if proj not in FUSED:
        return spec.shapes.get(where)
    parts = [spec.shapes.get((layer, p)) for p in FUSED[proj]]
    if any(s is None for s in parts):
        return None
    return parts[0][0], sum(out for _, out in parts)


def _split(spec: ModelSpec, where: tuple[int, str], b: torch.Tensor):
    """(slice, B rows of that slice) for a fused target; the target itself otherwise."""
    layer, proj = where
    if proj not in FUSED:
        return [(where, b)]
    sizes = [spec.shapes[(layer, p)][1] for p in FUSED[proj]]
    return [((layer, p), rows.contiguous()) for p, rows in zip(FUSED[proj], b.split(sizes, dim=0))]

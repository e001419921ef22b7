"""Load a GGUF file's weights into the engine's modules, quantized tensors kept quantized.

The model is built on the meta device; dense tensors (norms, F16/F32 weights) are materialized as they are
read, quantized ones go to their Linear (`set_quantized`) or become the token table, so no dense copy of a
quantized weight ever exists. Memory is what the kernels' layout takes, about the file's size.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from llmchat.kernels.quant import QuantWeight

from ..layers.linear import Linear
from ..models import MODEL_CLASSES, ModelArgs
from .gguf_tensors import GGUFError, field, hf_name, open_reader, read_tensors
from .gguf_load_plan import LoadPlan, plan_load
from .prepared_cache import PreparedCache


def _materialize(model: nn.Module, name: str, dtype: torch.dtype) -> torch.Tensor:
    """The parameter `name`, allocated on the CPU if it is still on the meta device."""
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    param = module._parameters[leaf]
    if param.device.type == "meta":
        param = nn.Parameter(torch.empty(param.shape, dtype=dtype), requires_grad=False)
        module._parameters[leaf] = param
    return param.data


def load_gguf_weights(model, path: Path, dtype: torch.dtype, target: Callable[[str], tuple[str, int | None]],
                      progress: Callable[[int, int], None] | None = None,
                      prepared: PreparedCache | None = None, layout: str | None = None) -> bool:
    """Fill `model` (a CausalLM on meta) from the GGUF at `path`; target maps a Hugging Face name to the engine
    parameter and fused slice (models.parameter_target). progress(bytes read, file bytes). prepared: where the
    quantized weights may already lie in the kernels' layout; True when they came from there (then only the
    file's dense tensors are read). layout: "tiles" or "rows", the kernels' layout block tensors are written in from
    the file by the compiled kernels, each in its final place (read_tensors, gguf_load_plan.py); None: the numpy repack."""
    reader = open_reader(path)
    arch = field(reader, "general.architecture")
    total = sum(int(t.n_bytes) for t in reader.tensors)
    from_cache = prepared is not None and prepared.load(
        model, progress and (lambda done, size: progress(int(done / size * total * 0.95), total)))
    done, seen = (int(total * 0.95) if from_cache else 0), set()
    params = dict(model.named_parameters())
    plan = plan_load(model, reader, arch, target, layout == "tiles") if layout and not from_cache else LoadPlan()
    for hf, value, nbytes in read_tensors(reader, model.args.config, arch, quantized=not from_cache,
                                             layout=layout, into=plan.into):
        name, index = target(hf)
        if name == "lm_head.weight":
            model.args.tie_word_embeddings = False   # the file has its own output head
        if name not in params and not (value is None and name == "model.embed_tokens.weight"):
            raise GGUFError(f"{path.name}: tensor for {hf} has no place in a {model.args.architecture} model")
        owner = model.get_submodule(name.rpartition(".")[0])
        if value is None:
            pass   # quantized, attached from the prepared-weights file
        elif isinstance(value, QuantWeight):
            if isinstance(owner, Linear) and name.endswith(".weight"):
                for i, part in _slices(owner, index, value):
                    owner.set_quantized(i, part)
            elif name == "model.embed_tokens.weight":
                model.set_quantized_embedding(value)
            else:
                raise GGUFError(f"{path.name}: {hf} is quantized ({value.source}); llmchat needs it as floats")
        else:
            dest = _materialize(model, name, dtype)
            if index is not None:
                dest = dest.narrow(0, owner.slice_offsets[index], owner.output_sizes[index])
            if tuple(dest.shape) != tuple(value.shape):
                raise GGUFError(f"{path.name}: {hf} has shape {tuple(value.shape)}, the model expects "
                                f"{tuple(dest.shape)}")
            dest.copy_(value)
        seen.add((name, index))
        done += nbytes if value is not None else 0
        if progress is not None:
            progress(min(done, total), total)
    for owner, runs in plan.runs:   # every slice written in place: the runs as laid out, nothing to join
        owner.attach_prepared_runs(runs)
    model.__dict__["_placed_weights"] = plan.placed()
    _check_complete(model, seen, path)
    return from_cache


def _slices(owner: Linear, index: int | None, value: QuantWeight) -> list[tuple[int | None, QuantWeight]]:
    """A fused tensor of the file (phi3's attn_qkv, ffn_up) cut into the projection's slices by rows (rows are
    independent blocks, so this is exact); any other tensor as it is."""
    if index is not None or len(owner.output_sizes) == 1:
        return [(index, value)]
    offsets = owner.slice_offsets
    return [(i, value.rows(slice(offsets[i], offsets[i + 1]))) for i in range(len(owner.output_sizes))]


def check_shapes(reader, config: dict, path: Path, target: Callable[[str], tuple[str, int | None]]) -> None:
    """Every tensor of the file fits the model its config describes (a meta-device dry run of the load)."""
    args = ModelArgs.from_config(config)
    with torch.device("meta"):
        model = MODEL_CLASSES[args.architecture](args, None, None)
    params = dict(model.named_parameters())
    arch = field(reader, "general.architecture")
    for t in reader.tensors:
        hf = hf_name(t.name, arch)
        if hf is None:
            continue
        name, index = target(hf)
        if name not in params:
            raise GGUFError(f"{path.name}: tensor {t.name} has no place in a {args.architecture} model")
        want = tuple(params[name].shape)
        if index is not None:
            owner = model.get_submodule(name.rpartition(".")[0])
            want = (owner.output_sizes[index], *want[1:])
        got = tuple(int(s) for s in reversed(t.shape))   # ggml lists the row length first
        if got != want:
            raise GGUFError(f"{path.name}: tensor {t.name} has shape {list(got)}, its config expects {list(want)}")


def _check_complete(model, seen: set, path: Path) -> None:
    missing = []
    for name, param in model.named_parameters():
        if param.device.type != "meta":
            continue
        owner = model.get_submodule(name.rpartition(".")[0])
        if name == "lm_head.weight" and model.args.tie_word_embeddings:
            continue   # tied to the token table in finish_init
        if isinstance(owner, Linear) and name.endswith(".weight") and owner.is_quantized:
            continue   # every slice must be quantized: Linear.finalize says which is not
        if name == "model.embed_tokens.weight" and model.quantized_embedding is not None:
            continue
        missing.append(name)
    if missing:
        shown = ", ".join(missing[:5]) + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else "")
        raise GGUFError(f"{path.name} is missing weights: {shown}")

"""Where each quantized tensor of a GGUF file lands in the kernels' layout (the tiles, or the rows where no
tile layout runs), decided from the tensor directory before any data is read, so a load writes every weight
once, in its final place.

A projection's slices of one layout run as one op call (Linear.quantized_runs: q/k/v, gate/up). Without a plan
each file tensor is tiled on its own, the slices are concatenated into their run, and every run is copied once
more into huge pages (CausalLM._quantized_for_kernels): three writes of the model, and two copies alive at once
for a moment. Here the runs (and the token table) are laid out in one huge-page buffer up front, and each file
tensor is written from its bytes straight into its rows of its run (kernels/gguf_tiles.py): the load holds the
weights once. A projection the plan cannot place whole (a tensor that does not tile, a fused file tensor
cut into slices, a shape the model does not expect) takes the path without a plan, which also reports errors.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from llmchat.kernels import gguf_tiles
from llmchat.kernels.memory import huge_page_slots
from llmchat.kernels.quant import QuantWeight

from ..layers.linear import Linear
from .gguf_blocks import BLOCKS
from .gguf_tensors import hf_name

TABLE = "model.embed_tokens.weight"


@dataclass
class LoadPlan:
    into: dict[str, QuantWeight] = field(default_factory=dict)   # file tensor name -> the rows it fills
    runs: list[tuple[Linear, list[tuple[int, QuantWeight]]]] = field(default_factory=list)
    table: QuantWeight | None = None

    def placed(self) -> list[QuantWeight]:
        """The weights laid out in huge pages: every run, and the table."""
        return [w for _, runs in self.runs for _, w in runs] + ([self.table] if self.table is not None else [])


def plan_load(model, reader, arch: str, target: Callable[[str], tuple[str, int | None]], tiles: bool) -> LoadPlan:
    slices: dict[Linear, dict[int, tuple[str, str, int, int]]] = {}
    table = None
    for t in reader.tensors:
        hf = hf_name(t.name, arch) if t.type_name in BLOCKS else None
        if hf is None:
            continue
        cols, rows = int(t.shape[0]), int(np.prod([int(s) for s in t.shape[1:]])) if len(t.shape) > 1 else 0
        if not gguf_tiles.takes(t.type_name, rows, cols, tiles):
            continue
        name, index = target(hf)
        if name == TABLE:
            if (rows, cols) == (model.args.vocab_size, model.args.hidden_size):
                table = (t.name, t.type_name, rows, cols)
            continue
        owner = _linear(model, name)
        if owner is None or (index is None and len(owner.output_sizes) > 1):
            continue
        i = index or 0
        if (rows, cols) == (owner.output_sizes[i], owner.in_features):
            slices.setdefault(owner, {})[i] = (t.name, t.type_name, rows, cols)
    # one huge-page buffer for every run and the table, laid out before anything is written
    layouts = [(owner, _runs(owner, parts, tiles)) for owner, parts in slices.items()
               if len(parts) == len(owner.output_sizes)]
    shapes = [(run[0][1], sum(p[2] for p in run), run[0][3]) for _, runs in layouts for _, run in runs]
    shapes += [table[1:]] if table is not None else []
    slots = iter(huge_page_slots([spec for shape in shapes for spec in gguf_tiles.specs(*shape, tiles)]))
    weights = iter([gguf_tiles.weight(shape[0], [next(slots) for _ in gguf_tiles.specs(*shape, tiles)], tiles)
                    for shape in shapes])
    plan = LoadPlan()
    for owner, runs in layouts:
        placed = []
        for start, run in runs:
            w, lo = next(weights), 0
            for tensor_name, _, n, _ in run:
                plan.into[tensor_name] = w.rows(slice(lo, lo + n))
                lo += n
            placed.append((start, w))
        plan.runs.append((owner, placed))
    if table is not None:
        plan.table = plan.into[table[0]] = next(weights)
    return plan


def _linear(model, name: str) -> Linear | None:
    if not name.endswith(".weight"):
        return None
    try:
        owner = model.get_submodule(name.rpartition(".")[0])
    except AttributeError:
        return None
    return owner if isinstance(owner, Linear) else None


def _runs(owner: Linear, parts: dict, tiles: bool) -> list[tuple[int, list]]:
    """Consecutive slices of one layout joined, as Linear.quantized_runs joins them."""
    runs: list[tuple[int, list]] = []
    last = None
    for i in range(len(owner.output_sizes)):
        part = parts[i]
        layout = _layout(part[1], tiles)
        if runs and layout == last:
            runs[-1][1].append(part)
        else:
            runs.append((owner.slice_offsets[i], [part]))
        last = layout
    return runs


def _layout(type_name: str, tiles: bool) -> tuple:
    specs = gguf_tiles.specs(type_name, 16, 256, tiles)
    return gguf_tiles.weight(type_name, [torch.empty(s, dtype=d, device="meta") for s, d in specs], tiles).layout

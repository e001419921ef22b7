"""LoraManager: the engine's one LoRA object. Hooks the model's projections, loads/unloads adapters, maps
each step's chunks to adapter segments.

Threads: prepare() (disk read, validation, tensor layout) runs in the caller's thread. install() writes
only into slots that no running request uses (the registry guarantees it) and swaps grown stacks in whole,
so it is safe while the engine thread is mid-step: other streams keep decoding during a load.
set_step()/group_chunks() run in the engine thread.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from .adapter import ModelSpec, base_model_aliases, load_lora_adapter
from .compute import COMPUTE_DTYPE, PreparedAdapter, build_site_weights, segments_from_runs, uniform_groups
from .registry import AdapterRegistry
from .stack import SiteStack

_LAYER_PREFIX = re.compile(r"^model\.layers\.(\d+)\.(?:self_attn|mlp)\.\w+$")
_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def resolve_adapter_path(name_or_path: str | Path) -> Path:
    """A local folder as is; otherwise a name or repo id from the model store (`llmchat models`)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    try:
        from ..store import resolve_model   # the store is a room beside the core: loaded only for a name
        return resolve_model(name_or_path)
    except (FileNotFoundError, RuntimeError) as exc:
        raise ValueError(f"no adapter folder or model-store adapter named {str(name_or_path)!r} ({exc})") from None


class LoraSite:
    """The hook on one projection (`Linear.lora`): its stacked adapters, applied to this step's segments."""

    def __init__(self, manager: LoraManager, layer) -> None:
        self.manager = manager
        pack_b = manager.kernels.pack_lora_b if manager.fused_op is not None else None
        self.stack = SiteStack(layer.in_features, layer.slice_offsets, manager.weights_dtype, pack_b)

    def apply(self, layer, x: torch.Tensor, out: torch.Tensor) -> None:
        manager = self.manager
        if not manager.segments:
            return
        if manager.fused_op is not None:
            self.stack.apply_fused(manager.fused_op, x, out, manager.segment_tensor)
        else:
            self.stack.apply(x, out, manager.segments, manager.uniform)


class LoraManager:
    def __init__(self, runner, max_adapters: int = 8, max_bytes: int = 1 << 30, fused: bool = True) -> None:
        """fused (EngineConfig.lora_fused): with the kernels built, each projection applies LoRA in one
        llmchat.kernels.lora_apply call with adapter weights in the model's dtype; False: the fp32 torch path."""
        self.runner = runner
        self.registry = AdapterRegistry(max_adapters, max_bytes)
        self.segments: list[tuple[int, int, int]] = []     # this step's (slot, first token, end token)
        self.segment_tensor: torch.Tensor | None = None    # the same as int32 [N, 3], for the fused op
        self.uniform: tuple[int, int, int, int] | None = None
        self.kernels = kernels = getattr(runner, "kernels", None)
        fused = fused and kernels is not None and runner.dtype in _FUSED_DTYPES
        self.fused_op = torch.ops.llmchat.lora_apply if fused else None
        self.weights_dtype = runner.dtype if fused else COMPUTE_DTYPE
        self.layers = []                                   # hooked Linear modules, site index = position
        self.slice_of: dict[tuple[int, str], tuple[int, int]] = {}   # (layer, "q_proj") -> (site, slice)
        shapes = {}
        for module in runner.model.modules():
            m = _LAYER_PREFIX.match(getattr(module, "prefix", "") or "")
            if m is None or not hasattr(module, "lora"):
                continue
            layer = int(m.group(1))
            for i, name in enumerate(module.slice_names):
                shapes[(layer, name)] = (module.in_features, module.output_sizes[i])
                self.slice_of[(layer, name)] = (len(self.layers), i)
            self.layers.append(module)
        self.spec = ModelSpec(shapes=shapes, names=base_model_aliases(runner.config.model_path, runner.raw_config),
                              path=Path(runner.config.model_path), dtype=self.weights_dtype)
        self.sites = [LoraSite(self, layer) for layer in self.layers]
        self._attached = False

    # ---- loading (caller's thread) ------------------------------------------------------------
    def prepare(self, name: str, path: str | Path) -> PreparedAdapter:
        """Read and validate the adapter and lay its tensors out per hooked projection (no engine change)."""
        if not name or not isinstance(name, str):
            raise ValueError("an adapter needs a non-empty name")
        adapter = load_lora_adapter(name, path, self.spec)
        per_site: list[list] = [[None] * len(layer.output_sizes) for layer in self.layers]
        for where, (a, b) in adapter.modules.items():
            site, i = self.slice_of[where]
            offsets = self.layers[site].slice_offsets
            per_site[site][i] = (offsets[i], offsets[i + 1], a, b)
        sites = tuple(build_site_weights(slices) for slices in per_site)
        nbytes = sum(w.nbytes for w in sites if w is not None)
        return PreparedAdapter(adapter.name, adapter.path, adapter.identity, sites, nbytes)

    def install(self, prepared: PreparedAdapter) -> None:
        """Make a prepared adapter resident (evicting LRU unused ones); ValueError if it cannot fit."""
        with self.registry.lock:
            plan = self.registry.install(dataclasses.replace(prepared, sites=()))   # the stacks hold the weights
            for slot in plan.evicted:
                self._fill(slot, None)
            self._fill(plan.slot, prepared)
        if not self._attached:            # a base-only engine never pays for the hooks
            for layer, site in zip(self.layers, self.sites):
                layer.lora = site
            self.runner.lora_manager = self
            self._attached = True

    def load(self, name: str, path: str | Path) -> None:
        """Load (or reload under the same name) from a folder or a model-store name."""
        self.install(self.prepare(name, resolve_adapter_path(path)))

    def unload(self, name: str) -> None:
        with self.registry.lock:
            slot = self.registry.unload(name)
            if slot is not None:
                self._fill(slot, None)

    def _fill(self, slot: int, prepared: PreparedAdapter | None) -> None:
        for i, site in enumerate(self.sites):
            site.stack.put(slot, None if prepared is None else prepared.sites[i])

    def ensure(self, name: str) -> None:
        """Make `name` resident: reload it if evicted; an unknown name that is an adapter folder or a model
        store name is loaded under that name (so a chat session can just name its adapter)."""
        path = self.registry.paths.get(name)
        if path is None:
            try:
                found = resolve_adapter_path(name)
            except ValueError:
                raise ValueError(f"adapter {name!r} is not loaded (load_adapter(name, path)), and no adapter "
                                 f"folder or model-store adapter has that name") from None
            self.load(name, found)
        elif self.registry.slot_of(name) is None:
            self.load(name, path)

    # ---- requests -------------------------------------------------------------------------------
    def is_registered(self, name: str) -> bool:
        return name in self.registry.paths

    def acquire(self, name: str) -> tuple[int, str]:
        """Pin `name` for one request: (slot, identity). An evicted adapter is reloaded from its folder."""
        for _ in range(3):           # a concurrent load may evict it again between reload and pin
            got = self.registry.acquire(name)
            if got is not None:
                return got
            path = self.registry.paths.get(name)
            if path is None:
                raise ValueError(f"adapter {name!r} is not loaded (load it with load_adapter(name, path))")
            self.load(name, path)
        raise ValueError(f"adapter {name!r} could not stay resident; too many adapters are in use")

    def release(self, slot: int) -> None:
        with self.registry.lock:
            if self.registry.release(slot):
                self._fill(slot, None)

    def resident_names(self) -> list[str]:
        return self.registry.resident_names()

    # ---- per step (engine thread) ---------------------------------------------------------------
    @staticmethod
    def group_chunks(chunks: list) -> tuple[list, torch.Tensor | None]:
        """Chunks reordered so each adapter's tokens are contiguous (base first), and the permutation
        that puts logits rows back in the caller's order (None if the order is unchanged)."""
        slots = [c.seq.adapter_slot for c in chunks]
        if all(a <= b for a, b in zip(slots, slots[1:])):
            return chunks, None
        order = sorted(range(len(chunks)), key=slots.__getitem__)
        restore = torch.empty(len(order), dtype=torch.long)
        restore[torch.tensor(order)] = torch.arange(len(order))
        return [chunks[i] for i in order], restore

    def set_step(self, chunks: list, metadata=None) -> None:
        """Token segments of this step's batch (token order = chunk order, each chunk contiguous)."""
        segments = segments_from_runs([(c.seq.adapter_slot, c.num_new_tokens) for c in chunks])
        if self.fused_op is None:
            self.uniform = uniform_groups(segments)
        elif segments:
            self.segment_tensor = torch.tensor(segments, dtype=torch.int32)
        self.segments = segments

    def in_step(self) -> bool:
        """Whether some token of the step set last uses an adapter."""
        return bool(self.segments)

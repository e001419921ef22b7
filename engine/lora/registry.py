"""Which adapters are resident, in which slot, and which may be evicted (pure bookkeeping, thread-safe).

A slot holds one adapter *version*. Requests pin the slot they run with, so a slot in use is never evicted
or reused: the model step can read slot tables without a lock. Loading a name again puts the new version in
another slot; the old one is retired (nameless) and freed when its last request finishes. Resident adapters
are bounded by a count and a byte budget; the least recently used unpinned ones are evicted, but their
name and folder stay registered so a later request reloads them.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .compute import PreparedAdapter


@dataclass
class Resident:
    adapter: PreparedAdapter
    named: bool = True          # False once retired (reloaded or unloaded while requests still use it)
    pins: int = 0
    last_used: int = 0


@dataclass
class InstallPlan:
    slot: int
    evicted: list[int] = field(default_factory=list)


class AdapterRegistry:
    def __init__(self, max_adapters: int, max_bytes: int) -> None:
        if max_adapters <= 0 or max_bytes <= 0:
            raise ValueError("max_adapters and the adapter memory budget must be positive")
        self.max_bytes = max_bytes
        self.slots: list[Resident | None] = [None] * max_adapters
        self.paths: dict[str, Path] = {}          # every registered name, resident or evicted
        self.lock = threading.RLock()
        self._clock = itertools.count(1)

    # -- queries -------------------------------------------------------------------------------
    def slot_of(self, name: str) -> int | None:
        with self.lock:
            for slot, res in enumerate(self.slots):
                if res is not None and res.named and res.adapter.name == name:
                    return slot
            return None

    def resident_names(self) -> list[str]:
        with self.lock:
            return sorted(r.adapter.name for r in self.slots if r is not None and r.named)

    def used_bytes(self) -> int:
        with self.lock:
            return sum(r.adapter.nbytes for r in self.slots if r is not None)

    # -- changes -------------------------------------------------------------------------------
    def install(self, adapter: PreparedAdapter) -> InstallPlan:
        """Make `adapter` resident under its name; evict LRU unpinned versions to fit. Atomic: on
        ValueError nothing changed."""
        with self.lock:
            old = self.slot_of(adapter.name)
            # A replaced version that nobody runs is freed first; a pinned one is retired.
            freed = {old} if old is not None and self.slots[old].pins == 0 else set()
            victims = sorted((r.last_used, s) for s, r in enumerate(self.slots)
                             if r is not None and r.pins == 0 and s not in freed)
            free_slots = [s for s, r in enumerate(self.slots) if r is None]

            def used() -> int:
                return sum(r.adapter.nbytes for s, r in enumerate(self.slots) if r is not None and s not in freed)

            while (not free_slots and not freed) or used() + adapter.nbytes > self.max_bytes:
                if not victims:
                    raise ValueError(self._no_room_message(adapter))
                freed.add(victims.pop(0)[1])
            slot = free_slots[0] if free_slots else min(freed)
            if old is not None and old not in freed:
                self.slots[old].named = False
            for s in freed:
                self.slots[s] = None
            self.slots[slot] = Resident(adapter, last_used=next(self._clock))
            self.paths[adapter.name] = adapter.path
            return InstallPlan(slot=slot, evicted=sorted(freed - {slot}))

    def _no_room_message(self, adapter: PreparedAdapter) -> str:
        if adapter.nbytes > self.max_bytes:
            return (f"adapter {adapter.name!r} needs {adapter.nbytes / 2**20:.1f} MiB, more than the adapter "
                    f"memory budget of {self.max_bytes / 2**20:.1f} MiB")
        busy = sorted(r.adapter.name for r in self.slots if r is not None and r.pins)
        return (f"cannot load adapter {adapter.name!r}: {len(self.slots)} adapter slots / "
                f"{self.max_bytes / 2**20:.1f} MiB are taken by adapters with running requests "
                f"({', '.join(busy)}); retry when they finish or raise the limits")

    def acquire(self, name: str) -> tuple[int, str] | None:
        """Pin the resident version of `name` for a request: (slot, identity), or None if not resident."""
        with self.lock:
            slot = self.slot_of(name)
            if slot is None:
                return None
            res = self.slots[slot]
            res.pins += 1
            res.last_used = next(self._clock)
            return slot, res.adapter.identity

    def release(self, slot: int) -> bool:
        """Unpin after a request ends. True if the slot was freed (a retired version's last user)."""
        with self.lock:
            res = self.slots[slot]
            if res is None or res.pins <= 0:
                raise RuntimeError(f"adapter slot {slot} released more often than acquired")
            res.pins -= 1
            if res.pins == 0 and not res.named:
                self.slots[slot] = None
                return True
            return False

    def unload(self, name: str) -> int | None:
        """Forget `name`. Returns the slot freed now, or None (not resident, or retired until its requests end)."""
        with self.lock:
            if name not in self.paths:
                raise ValueError(f"no adapter named {name!r} is loaded")
            del self.paths[name]
            slot = self.slot_of(name)
            if slot is None:
                return None
            if self.slots[slot].pins:
                self.slots[slot].named = False
                return None
            self.slots[slot] = None
            return slot

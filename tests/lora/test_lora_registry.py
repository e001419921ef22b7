"""Slot bookkeeping: LRU by count and bytes, pinned adapters never evicted, reload retires, failures change nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmchat.engine.lora.compute import PreparedAdapter
from llmchat.engine.lora.registry import AdapterRegistry


def adapter(name: str, nbytes: int = 100, version: str = "v1") -> PreparedAdapter:
    return PreparedAdapter(name, Path(f"/adapters/{name}"), f"{name}@{version}", (), nbytes)


def state(reg: AdapterRegistry):
    return [None if r is None else (r.adapter.identity, r.named, r.pins) for r in reg.slots]


def test_least_recently_used_is_evicted_when_slots_run_out():
    reg = AdapterRegistry(max_adapters=2, max_bytes=10_000)
    reg.install(adapter("a"))
    reg.install(adapter("b"))
    reg.release(reg.acquire("a")[0])          # a used after b
    plan = reg.install(adapter("c"))
    assert reg.resident_names() == ["a", "c"]
    assert plan.slot == 1 and plan.evicted == []   # b's slot reused
    assert "b" in reg.paths                          # still registered: a request may reload it


def test_byte_budget_evicts_until_the_new_adapter_fits():
    reg = AdapterRegistry(max_adapters=8, max_bytes=300)
    for name in ("a", "b", "c"):
        reg.install(adapter(name, 100))
    plan = reg.install(adapter("big", 250))
    assert reg.resident_names() == ["big"]
    assert plan.evicted == [0, 1, 2] and plan.slot == 3
    assert reg.used_bytes() == 250


def test_pinned_adapters_are_never_evicted_and_a_failed_install_changes_nothing():
    reg = AdapterRegistry(max_adapters=2, max_bytes=10_000)
    reg.install(adapter("a"))
    reg.install(adapter("b"))
    reg.acquire("a")
    reg.acquire("b")
    before = state(reg)
    with pytest.raises(ValueError, match="running requests"):
        reg.install(adapter("c"))
    assert state(reg) == before and "c" not in reg.paths
    with pytest.raises(ValueError, match="more than the adapter memory budget"):
        reg.install(adapter("huge", 20_000))
    assert state(reg) == before


def test_reloading_a_name_in_use_retires_the_old_version_until_its_requests_end():
    reg = AdapterRegistry(max_adapters=3, max_bytes=10_000)
    reg.install(adapter("a", version="v1"))
    old_slot, old_identity = reg.acquire("a")
    plan = reg.install(adapter("a", version="v2"))
    assert plan.slot != old_slot
    assert reg.acquire("a") == (plan.slot, "a@v2")          # new requests get the new weights
    assert state(reg)[old_slot] == ("a@v1", False, 1)        # the running one keeps the old
    assert reg.release(old_slot) is True and reg.slots[old_slot] is None


def test_reloading_an_unused_name_reuses_its_slot():
    reg = AdapterRegistry(max_adapters=1, max_bytes=10_000)
    reg.install(adapter("a", version="v1"))
    plan = reg.install(adapter("a", version="v2"))
    assert plan.slot == 0 and reg.acquire("a") == (0, "a@v2")


def test_unload_frees_at_once_or_after_the_last_request():
    reg = AdapterRegistry(max_adapters=2, max_bytes=10_000)
    reg.install(adapter("a"))
    reg.install(adapter("b"))
    assert reg.unload("a") == 0 and reg.resident_names() == ["b"]
    slot, _ = reg.acquire("b")
    assert reg.unload("b") is None                 # still running
    assert reg.acquire("b") is None and "b" not in reg.paths
    assert reg.release(slot) is True
    with pytest.raises(ValueError, match="no adapter named"):
        reg.unload("b")


def test_release_without_acquire_is_an_error():
    reg = AdapterRegistry(max_adapters=1, max_bytes=10_000)
    reg.install(adapter("a"))
    with pytest.raises(RuntimeError):
        reg.release(0)

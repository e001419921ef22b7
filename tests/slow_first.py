"""The C++ driver builds first: pytest-xdist hands whole modules to its two workers (--dist loadfile), and a build
module takes minutes (compiling every ISA variant, running the AArch64 ones under qemu). Handed out late, one
is the run's tail: a worker builds alone while the other has nothing left. So the modules marked slow lead,
and the rest keep the order xdist would give them (most tests first; pyproject.toml turns xdist's own
reordering off, which would undo this one). Runs after pytest-randomly's shuffle: ties keep its order."""
from __future__ import annotations

from collections import Counter

import pytest


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    counts = Counter(_module(item) for item in items)
    slow = {_module(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (_module(item) not in slow, -counts[_module(item)]))  # stable: a module stays whole

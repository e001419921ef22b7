"""The package's layers, read from its source (tests/import_graph.py): no import cycle, and dependencies that
point one way: front ends (tui) -> engine -> kernels, the engine's rooms beside its core."""
from __future__ import annotations

import ast

from import_graph import cycles, import_graph, imported_names

ROOMS = ("llmchat.engine.serve", "llmchat.engine.store", "llmchat.engine.compare", "llmchat.engine.remote",
         "llmchat.engine.bench")
# LLM("name") and an adapter given by library name resolve through the store (one rule for every caller);
# the store is imported inside those functions, only when a name is not a folder
CORE_USES_OF_ROOMS = {("llmchat.engine.llm", "llmchat.engine.store"),
                      ("llmchat.engine.lora.manager", "llmchat.engine.store")}


def _room(module: str) -> str | None:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


def _edges(graph, source_filter, target_filter):
    return sorted((m, t) for m, targets in graph.items() if source_filter(m) for t in targets if target_filter(t))


def test_the_graph_reads_every_module_and_imports_inside_functions():
    graph = import_graph()
    assert {"llmchat.engine.llm", "llmchat.tui.app", "llmchat.kernels", "llmchat.engine.serve.app"} <= set(graph)
    assert "llmchat.engine.models.llama" in graph["llmchat.engine.models"]      # `from .llama import ...`
    assert "llmchat.engine.store" in graph["llmchat.engine.llm"]                 # imported inside a function


def test_type_checking_imports_are_not_edges_and_relative_ones_resolve():
    source = ("from typing import TYPE_CHECKING\n"
              "from . import sibling\n"
              "from ..layers.norm import RMSNorm\n"
              "if TYPE_CHECKING:\n"
              "    from llmchat.tui.app import LlmChatApp\n"
              "def f():\n"
              "    import llmchat.kernels.ops as ops\n")
    names = imported_names(ast.parse(source), "llmchat.engine.models.x", is_package=False)
    assert {"llmchat.engine.models", "llmchat.engine.models.sibling", "llmchat.engine.layers.norm.RMSNorm",
            "llmchat.kernels.ops"} <= names
    assert not any(n.startswith("llmchat.tui") for n in names)


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_kernels_know_nothing_of_the_engine_or_the_app():
    graph = import_graph()
    assert _edges(graph, lambda m: m.startswith("llmchat.kernels"),
                  lambda t: not t.startswith("llmchat.kernels")) == []


def test_the_engine_never_imports_the_app():
    graph = import_graph()
    assert _edges(graph, lambda m: m.startswith("llmchat.engine"), lambda t: t.startswith("llmchat.tui")) == []


def test_the_engine_core_does_not_import_its_rooms():
    graph = import_graph()
    edges = _edges(graph, lambda m: m.startswith("llmchat.engine") and _room(m) is None, lambda t: _room(t) is not None)
    assert {(m, _room(t)) for m, t in edges} <= CORE_USES_OF_ROOMS

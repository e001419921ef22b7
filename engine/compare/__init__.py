"""Offline comparison of models and adapters over a prompt set (UI-free; `llmchat compare` drives it).

prompts.py parses the prompt set, plan.py builds the variants and shared settings, runner.py runs them
(one engine per model, one batched generate per model), store.py keeps results for resume, report.py
builds the report and writers.py writes it as Markdown, JSON and CSV. The JSON schema is in schema.py.
"""
from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("llmchat")
except _metadata.PackageNotFoundError:   # running from a checkout without an install
    __version__ = "0+unknown"

from llmchat.engine.compare.plan import CompareSettings, Variant, build_variants  # noqa: E402
from llmchat.engine.compare.prompts import PromptError, PromptItem, load_prompts  # noqa: E402
from llmchat.engine.compare.schema import SCHEMA_ID, load_report  # noqa: E402

__all__ = ["CompareSettings", "Variant", "build_variants", "PromptError", "PromptItem", "load_prompts",
           "SCHEMA_ID", "load_report", "__version__"]

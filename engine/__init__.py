"""llmchat engine: continuous batching over a paged KV cache with automatic prefix caching.

    from llmchat.engine import LLM, SamplingParams, AsyncEngine
"""
from .client import BatchClient, EngineClient
from .config import EngineConfig
from .metrics import MetricsSnapshot
from .outputs import RequestMetrics, RequestOutput, StreamDelta
from .sampling_params import SamplingParams

__all__ = ["LLM", "AsyncEngine", "SamplingParams", "RequestOutput", "StreamDelta", "RequestMetrics",
           "MetricsSnapshot", "EngineConfig", "EngineClient", "BatchClient"]


def __getattr__(name):
    # LLM and AsyncEngine pull in torch and the model code: import them only when asked for.
    if name == "LLM":
        from .llm import LLM
        return LLM
    if name == "AsyncEngine":
        from .async_engine import AsyncEngine
        return AsyncEngine
    raise AttributeError(f"module 'llmchat.engine' has no attribute {name!r}")

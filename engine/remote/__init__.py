"""Remote OpenAI-compatible engines, used like the local one (generate / abort / metrics)."""
from .catalog import Health, check_health, list_all, list_models
from .endpoints import (REMOTE_PREFIX, Endpoint, endpoints_from_settings, find_endpoint, is_remote, make_endpoint,
                        merge_endpoints, parse_endpoint_arg, split_remote)
from .remote_engine import RemoteEngine
from .remote_llm import RemoteLLM
from .sse import RemoteError

__all__ = ["Endpoint", "Health", "REMOTE_PREFIX", "RemoteEngine", "RemoteLLM", "RemoteError", "check_health",
           "endpoints_from_settings", "find_endpoint", "is_remote", "list_all", "list_models", "make_endpoint",
           "merge_endpoints", "parse_endpoint_arg", "split_remote"]

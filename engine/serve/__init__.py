"""`llmchat serve`: an OpenAI-compatible HTTP server on the engine (FastAPI + uvicorn).

A front end like the TUI: it reaches the engine only through AsyncEngine (generate / abort / metrics /
load_adapter), and nothing else in llmchat.engine imports it.

    from llmchat.engine.serve import ModelSpec, ServerSettings, build_app, serve
"""
from .app import build_app
from .run import serve
from .state import ModelSpec, ServerSettings, ServerState

__all__ = ["build_app", "serve", "ModelSpec", "ServerSettings", "ServerState"]

"""The OpenAPI document as the server behaves. FastAPI declares a 422 for every body it validates, but this
server answers bad input with a 400 (declared per route, with OpenAI's error body): the 422s go. Token ids in a
completion prompt are bounded by the served vocabularies once the models are loaded (the document is built
again until then)."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi


def truthful_openapi(app: FastAPI, state) -> dict:
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    for operations in schema["paths"].values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    if state.ready:
        vocabularies = [_vocab_size(engine) for engine in state.engines.values()]
        if vocabularies and None not in vocabularies:
            _bound_token_ids(components["CompletionRequest"]["properties"]["prompt"], min(vocabularies) - 1)
        app.openapi_schema = schema
    return schema


def _vocab_size(engine) -> int | None:
    """An AsyncEngine's vocabulary (the model's, which may exceed the tokenizer's); None for another engine."""
    return getattr(getattr(engine, "engine", None), "vocab_size", None)


def _bound_token_ids(node, largest: int) -> None:
    """Every integer (a token id) under the prompt's schema: at most the largest id every model knows."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            node["maximum"] = largest
        for value in node.values():
            _bound_token_ids(value, largest)
    elif isinstance(node, list):
        for value in node:
            _bound_token_ids(value, largest)

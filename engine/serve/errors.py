"""Every failure leaves as OpenAI's error JSON {"error": {message, type, param, code}} with its status.

Bad input is a 400 (never a 422, a traceback or a 500); only a real fault inside the server is a 500,
and even then the body says nothing about the code.
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from jinja2 import TemplateError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
               503: "service_unavailable_error"}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """OpenAI's error body."""
    error: ErrorDetail


STATUS_MEANINGS = {400: "the request is invalid (the message says what and `param` where)",
                   401: "missing or wrong API key (when the server has one)",
                   404: "no such model (or route)", 413: "the request body is too large",
                   429: "too many pending requests: retry later", 500: "a fault inside the server",
                   503: "the model is loading, or failed to load"}


def error_responses(*statuses: int) -> dict:
    """OpenAPI `responses` declaring each status with OpenAI's error body."""
    return {status: {"model": ErrorResponse, "description": STATUS_MEANINGS[status]} for status in statuses}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    # pydantic names the union branch it tried ("str", "list[...]"): keep the field path readable
    loc = [p for p in loc if not (p.startswith(("list[", "function-")) or p in ("str", "int", "float"))]
    param = ".".join(loc) or None
    message = first.get("msg", "invalid value")
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON", None
    if not loc:   # the body itself: missing, empty, or not an object
        return "the request body must be a JSON object", None
    return (f"{param}: {message}" if param else message), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return error_response(400, message, param, "invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error_response(exc.status_code, message.get(exc.status_code, str(exc.detail)),
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(TemplateError)
    async def _template(request: Request, exc: TemplateError):
        # the model's chat template refused the messages (raise_exception: roles out of order, a missing field)
        return error_response(400, f"the chat template refused the messages: {exc}", "messages", "invalid_value")

    @app.exception_handler(Exception)
    async def _fault(request: Request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "internal server error (see the server log)", code="internal_error")

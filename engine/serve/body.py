"""The base of every request body model: unknown fields accepted and ignored (as OpenAI servers do), no NaN, and
JSON's types as the schema states them (strict: "1" is not a number, 0 is not false)."""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema


class Body(BaseModel):
    # unknown fields (newer OpenAI options, client metadata) are accepted and ignored, as OpenAI servers do
    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)


def _false_only(value: bool) -> bool:
    if value:
        raise ValueError("not supported by this server: false only")
    return value


# an OpenAI option the server does not serve: only false is accepted, and the schema says so
FalseOnly = Annotated[bool, AfterValidator(_false_only), WithJsonSchema({"type": "boolean", "enum": [False]})]


def _whole_number(value):
    """JSON Schema's integer is any number without a fraction: 3.0 is one (strict pydantic would refuse it)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def IntIn(low: int | None = None, high: int | None = None):
    """An integer type (3.0 included) within [low, high]; the bounds inside the type, so the schema states them."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_whole_number)]


Int = IntIn()

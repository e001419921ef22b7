"""The ways clients ask for a constrained reply, onto the engine's StructuredOutputs: OpenAI's `response_format`
(json_object, json_schema), vLLM's `structured_outputs` (json, regex, choice, grammar, json_object) and
llama-server's top-level `grammar` (GBNF) and `json_schema`. One request gives at most one of them; the library's
verdict on the constraint itself comes back from the engine as a 400 naming the parameter."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..structured_outputs import StructuredOutputs
from .body import Body
from .errors import ApiError


class TextFormat(Body):
    type: Literal["text"]


class JsonObjectFormat(Body):
    type: Literal["json_object"]


class JsonSchemaSpec(Body):
    name: str = Field("response", max_length=64)
    description: str | None = None
    schema_: dict = Field({}, alias="schema", description="the JSON schema the reply follows")
    strict: bool | None = Field(None, description="always enforced: the reply is decoded under the schema")


class JsonSchemaFormat(Body):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


class StructuredOutputsSpec(Body):
    """vLLM's structured_outputs: give exactly one."""
    json_: dict | str | None = Field(None, alias="json", description="a JSON schema (an object, or its text)")
    regex: str | None = None
    choice: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)
    grammar: str | None = Field(None, description="a Lark (llguidance) or GBNF (llama.cpp) grammar")
    json_object: bool | None = None


def requested_constraint(response_format, structured_outputs: StructuredOutputsSpec | None, grammar: str | None,
                         json_schema) -> StructuredOutputs | None:
    """The one constraint a request asks for, or None. Two at once is a 400 (which would win is a guess)."""
    found: list[StructuredOutputs] = []
    if isinstance(response_format, JsonObjectFormat):
        found.append(StructuredOutputs(json_object=True, parameter="response_format"))
    elif isinstance(response_format, JsonSchemaFormat):
        found.append(StructuredOutputs(json=response_format.json_schema.schema_,
                                       parameter="response_format.json_schema.schema"))
    if structured_outputs is not None and (spec := _from_spec(structured_outputs)) is not None:
        found.append(spec)
    if grammar is not None:
        found.append(StructuredOutputs(grammar=grammar, parameter="grammar"))
    if json_schema is not None:
        found.append(StructuredOutputs(json=json_schema, parameter="json_schema"))
    if len(found) > 1:
        raise ApiError(400, "give one of response_format, structured_outputs, grammar and json_schema, not "
                            f"several ({', '.join(c.parameter.split('.')[0] for c in found)})",
                       param=found[1].parameter.split(".")[0])
    return found[0] if found else None


def _from_spec(spec: StructuredOutputsSpec) -> StructuredOutputs | None:
    """None when it asks for nothing (`{}`, `{"json_object": false}`)."""
    given = {name: value for name, value in (("json", spec.json_), ("regex", spec.regex), ("choice", spec.choice),
                                             ("grammar", spec.grammar), ("json_object", spec.json_object or None))
             if value is not None}
    if not given:
        return None
    if len(given) != 1:
        raise ApiError(400, "structured_outputs: give exactly one of json, regex, choice, grammar, json_object "
                            f"(got {', '.join(given) or 'none'})", param="structured_outputs")
    (name, value), = given.items()
    constraint = StructuredOutputs(parameter=f"structured_outputs.{name}", **{name: value})
    try:
        constraint.validate()
    except ValueError as exc:
        raise ApiError(400, str(exc), param=constraint.parameter) from None
    return constraint

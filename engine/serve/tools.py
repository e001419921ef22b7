"""`tools` and `tool_choice` of a chat request: the tools go into the prompt in the model's own format (its chat
template's `tools`), past calls and results go back as the template expects them, and `required` or a named
function becomes a grammar, so the reply is always a call that parses.

A template that knows no tools (SmolLM2's, a plain ChatML one) gets them as a system message in the Hermes
format, with past calls and results written out as text: the reply is parsed the same way.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from ..structured_outputs import StructuredOutputs
from .body import Body
from .errors import ApiError
from ..tool_calls import CALL_CLOSE, CALL_OPEN, HERMES, LLAMA3

# the compact JSON a call is written in (and read back from): no room for a small model to pad whitespace
CALL_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class FunctionDefinition(Body):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict | None = Field(None, description="a JSON schema of the arguments object")
    strict: bool | None = None


class Tool(Body):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Body):
    name: str


class NamedToolChoice(Body):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


@dataclass
class ToolPlan:
    """How one request uses its tools."""
    tools: list[dict]                        # as the chat template takes them
    style: str                               # the call format the model writes (tool_calls.HERMES, LLAMA3)
    in_template: bool                        # the template renders tools itself
    parallel: bool
    constraint: StructuredOutputs | None     # tool_choice required or named: the reply must be a call

    @property
    def names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools}


def template_text(template) -> str:
    if isinstance(template, dict):   # named templates: transformers takes "tool_use" when tools are given
        return template.get("tool_use") or template.get("default") or ""
    return template or ""


def renders_tools(template) -> bool:
    return "tools" in template_text(template)


def plan_tools(tools: list[Tool] | None, choice: ToolChoice | None, parallel: bool | None,
               template) -> ToolPlan | None:
    """None when the request uses no tools (none given, or tool_choice "none": the prompt carries none)."""
    choice = choice or "auto"
    if not tools:   # the schema makes tool_choice need tools: this is only tool_choice's default
        return None
    if choice == "none":
        return None
    declared = [t.model_dump(exclude_none=True) for t in tools]
    names = [t.function.name for t in tools]
    if len(set(names)) != len(names):
        raise ApiError(400, "tools: every function needs its own name", param="tools")
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise ApiError(400, f"tool_choice names {choice.function.name!r}, which is not among the tools "
                                f"({', '.join(names)})", param="tool_choice")
        chosen = [t for t in declared if t["function"]["name"] == choice.function.name]
    else:
        chosen = declared
    text = template_text(template)
    style = LLAMA3 if (CALL_OPEN not in text and '"parameters"' in text) else HERMES
    in_template = renders_tools(template)
    # a named function is called once (OpenAI forces "a call to it"); otherwise parallel_tool_calls decides
    parallel = parallel is not False and not isinstance(choice, NamedToolChoice)
    constraint = None
    if choice == "required" or isinstance(choice, NamedToolChoice):
        constraint = StructuredOutputs(grammar=call_grammar(chosen, style, parallel), parameter="tools")
    return ToolPlan(declared, style, in_template, parallel, constraint)


def _call_schema(tool: dict, arguments_key: str) -> dict:
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object"}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, arguments_key: parameters},
            "required": ["name", arguments_key], "additionalProperties": False, "x-guidance": CALL_JSON}


def call_grammar(tools: list[dict], style: str, parallel: bool) -> str:
    """A Lark grammar (llguidance's) of one call (or several, when parallel) to any of `tools`."""
    key = "parameters" if style == LLAMA3 else "arguments"
    alternatives = []
    rules = []
    for i, tool in enumerate(tools):
        schema = json.dumps(_call_schema(tool, key))
        if style == LLAMA3:
            rules.append(f"call_{i}: %json {schema}")
        else:
            rules.append(f'call_{i}: "{CALL_OPEN}\\n" %json {schema} "\\n{CALL_CLOSE}"')
        alternatives.append(f"call_{i}")
    start = "start: call" if (style == LLAMA3 or not parallel) else 'start: call ("\\n" call)*'
    return "\n".join([start, "call: " + " | ".join(alternatives), *rules])


def system_prompt(tools: list[dict]) -> str:
    """The tools for a template that has no place for them, in the Hermes format the parser reads."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("You can call functions to help with the user's request. These are the functions, one JSON "
            f"signature per line, inside <tools></tools>:\n<tools>\n{lines}\n</tools>\n\n"
            "To call one, answer with a JSON object holding its name and arguments inside "
            f"{CALL_OPEN}{CALL_CLOSE} tags:\n{CALL_OPEN}\n"
            '{"name": <function name>, "arguments": <arguments as a JSON object>}\n' + CALL_CLOSE)


def written_out(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """Messages for a template without tools: the tools (if any) in the system message, past calls and results
    as text."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(f"{CALL_OPEN}\n{json.dumps(c['function'], ensure_ascii=False)}\n{CALL_CLOSE}"
                              for c in m["tool_calls"])
            content = f"{m['content']}\n{calls}" if m["content"] else calls
            out.append({**{k: v for k, v in m.items() if k != "tool_calls"}, "content": content})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append(m)
    if not tools:
        return out
    prompt = system_prompt(tools)
    if out and out[0]["role"] == "system":
        return [{**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}, *out[1:]]
    return [{"role": "system", "content": prompt}, *out]

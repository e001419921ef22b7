"""What a constrained request asks for: a JSON schema, any JSON object, a regex, a choice among strings or a
grammar (Lark or llama.cpp's GBNF). The names follow vLLM's `structured_outputs`, which clients already send.

The engine turns it into a llguidance grammar (engine/grammar.py); a malformed constraint is a ValueError
that names the parameter and quotes the library's message, raised before the request runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llguidance import LLMatcher, grammar_from

# Whitespace between JSON tokens: none, one space, or what a model writes when it pretty-prints (one newline and
# an indent), as llama.cpp's JSON grammars allow; never more, so a small model cannot pad a reply with blank
# lines until it runs out of tokens. A schema's own "x-guidance" options override it.
JSON_DEFAULTS = {"whitespace_pattern": r"( |\n[ \t]{0,20})?"}


@dataclass
class StructuredOutputs:
    """Exactly one of the fields is set. `parameter` is the request field a front end took it from (named in
    error messages: "response_format.json_schema.schema: ...")."""

    json: dict | str | None = None         # a JSON schema (a dict, or its text)
    json_object: bool = False              # any JSON object
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None             # Lark (llguidance's dialect) or GBNF (llama.cpp's)
    parameter: str = field(default="structured_outputs", compare=False)

    def kinds(self) -> list[str]:
        return [name for name, value in (("json", self.json), ("json_object", self.json_object or None),
                                         ("regex", self.regex), ("choice", self.choice),
                                         ("grammar", self.grammar)) if value is not None]

    def validate(self) -> None:
        kinds = self.kinds()
        if len(kinds) != 1:
            raise ValueError(f"{self.parameter}: give exactly one of json, json_object, regex, choice, grammar "
                             f"(got {', '.join(kinds) or 'none'})")
        if self.choice is not None and (not self.choice or not all(isinstance(c, str) and c for c in self.choice)):
            raise ValueError(f"{self.parameter}: choice must be a non-empty list of non-empty strings")
        if isinstance(self.json, str):
            try:
                self.json = json.loads(self.json)
            except json.JSONDecodeError as e:
                raise ValueError(f"{self.parameter}: the JSON schema is not valid JSON: {e}") from None
        if self.json is not None and not isinstance(self.json, (dict, bool)):
            raise ValueError(f"{self.parameter}: a JSON schema is an object, got {type(self.json).__name__}")

    def grammar_text(self) -> str:
        """The llguidance grammar (not yet checked against a tokenizer: GrammarCompiler.matcher does that)."""
        try:
            if self.json is not None:
                return LLMatcher.grammar_from_json_schema(json.dumps(_schema(self.json)), defaults=JSON_DEFAULTS)
            if self.json_object:
                return LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=JSON_DEFAULTS)
            if self.regex is not None:
                return grammar_from("regex", self.regex)
            if self.choice is not None:
                return grammar_from("choice", json.dumps(self.choice))
            return grammar_from("grammar", self.grammar or "")
        except ValueError as e:
            raise ValueError(f"{self.parameter}: {e}") from None


def _schema(value: Any) -> dict:
    """`true` allows any JSON value (JSON Schema's boolean schema); `false`, which allows nothing, is refused."""
    if value is True:
        return {}
    if value is False:
        raise ValueError("the schema is `false`, which no reply can satisfy")
    return value

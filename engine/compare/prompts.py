"""Prompt sets: JSONL (one object per line) or plain text (one prompt per line).

JSONL line: {"prompt": "..."} or {"messages": [{"role": ..., "content": ...}, ...]}, optional
"system" (str), "expected" (str or list of str), "id" (str) and "schema" (a JSON schema object: the reply is
constrained to it, unless the run says otherwise, and scored for validity). Files ending in .jsonl / .ndjson are
JSONL; anything else is plain text. Blank lines are skipped in both. A bad line becomes a PromptError
with its line number; the other lines still load.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

JSONL_SUFFIXES = (".jsonl", ".ndjson")
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class PromptItem:
    index: int                      # position among the valid prompts
    line: int                       # 1-based line in the file
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    system: str | None = None
    expected: str | tuple[str, ...] | None = None
    id: str | None = None
    schema: str | None = None       # a JSON schema, as canonical JSON text (the item stays hashable)

    def engine_input(self, raw: bool = False) -> str | list[dict]:
        """What LLM.generate gets: chat messages, or the bare text when `raw` (no chat template)."""
        if self.messages is not None:
            msgs = [dict(m) for m in self.messages]
            if self.system is not None and not (msgs and msgs[0]["role"] == "system"):
                msgs.insert(0, {"role": "system", "content": self.system})
            return msgs
        if raw:
            return self.prompt if self.system is None else f"{self.system}\n\n{self.prompt}"
        msgs = [{"role": "user", "content": self.prompt}]
        if self.system is not None:
            msgs.insert(0, {"role": "system", "content": self.system})
        return msgs

    def input_hash(self, raw: bool = False) -> str:
        """Identifies the request content for resume: changes when the prompt changes."""
        request = self.engine_input(raw)
        if self.schema is not None:   # a schema changes the reply; a prompt without one keeps its old hash
            request = {"input": request, "schema": self.schema}
        blob = json.dumps(request, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def display(self) -> str:
        """One line for titles and tables: the last user turn, or the prompt."""
        text = self.prompt
        if text is None:
            users = [m["content"] for m in self.messages if m["role"] == "user"] or [self.messages[-1]["content"]]
            text = users[-1]
        return " ".join(text.split())

    def to_json(self) -> dict:
        return {"index": self.index, "line": self.line, "id": self.id, "prompt": self.prompt,
                "messages": [dict(m) for m in self.messages] if self.messages is not None else None,
                "system": self.system,
                "expected": list(self.expected) if isinstance(self.expected, tuple) else self.expected,
                "schema": self.schema_dict, "display": self.display}

    @property
    def schema_dict(self) -> dict | None:
        return None if self.schema is None else json.loads(self.schema)


@dataclass(frozen=True)
class PromptError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def load_prompts(path: str | Path) -> tuple[list[PromptItem], list[PromptError]]:
    """Parse a prompt file; FileNotFoundError / ValueError only for a missing or unreadable file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"prompt file {path} is not UTF-8 text: {exc}") from None
    is_jsonl = path.suffix.lower() in JSONL_SUFFIXES
    items: list[PromptItem] = []
    errors: list[PromptError] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if not is_jsonl:
            items.append(PromptItem(index=len(items), line=number, prompt=text.strip()))
            continue
        try:
            items.append(_parse_json_line(text, index=len(items), line=number))
        except ValueError as exc:
            errors.append(PromptError(number, str(exc)))
    return items, errors


def _parse_json_line(text: str, index: int, line: int) -> PromptItem:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        # some messages end in "at" ("Unterminated string starting at"): the column completes them
        raise ValueError(f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        keys = ", ".join(sorted(obj)) or "none"
        raise ValueError(f"needs exactly one of 'prompt' or 'messages' (keys found: {keys})")
    prompt = messages = None
    if has_prompt:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("'prompt' must be a non-empty string")
    else:
        messages = _check_messages(obj["messages"])
    system = _optional_str(obj, "system")
    item_id = obj.get("id")
    if item_id is not None and not isinstance(item_id, (str, int)):
        raise ValueError("'id' must be a string or a number")
    return PromptItem(index=index, line=line, prompt=prompt, messages=messages, system=system,
                      expected=_check_expected(obj.get("expected")),
                      id=None if item_id is None else str(item_id), schema=_check_schema(obj.get("schema")))


def _check_messages(messages) -> tuple[dict, ...]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list of {role, content} objects")
    checked = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'content'")
        if msg.get("role") not in ROLES:
            raise ValueError(f"messages[{i}] has role {msg.get('role')!r}; use one of {', '.join(ROLES)}")
        checked.append({"role": msg["role"], "content": msg["content"]})
    return tuple(checked)


def _check_expected(expected) -> str | tuple[str, ...] | None:
    if expected is None or isinstance(expected, str):
        return expected
    if isinstance(expected, list) and expected and all(isinstance(e, str) for e in expected):
        return tuple(expected)
    raise ValueError("'expected' must be a string or a non-empty list of strings")


def _check_schema(schema) -> str | None:
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise ValueError(f"'schema' must be a JSON schema object, got {type(schema).__name__}")
    return json.dumps(schema, sort_keys=True)


def _optional_str(obj: dict, key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string")
    return value

"""Tool calls in a reply shown as tool calls: where a model writes `<tool_call>{"name": ..., "arguments": ...}
</tool_call>` (Qwen2.5, Qwen3, SmolLM3, Hermes; engine/tool_calls.py reads the format), the chat shows the
function's name and its arguments as JSON instead of the raw tags."""
from __future__ import annotations

import json

from llmchat.engine.tool_calls import CALL_CLOSE, CALL_OPEN, ToolCall, parse_call


def show_tool_calls(text: str) -> str:
    """The reply's Markdown with each complete call as a titled JSON block; a call still streaming shows as
    one being written; text that only looks like a call stays as the model wrote it."""
    if CALL_OPEN not in text:
        return text
    out, rest = [], text
    while CALL_OPEN in rest:
        before, _, after = rest.partition(CALL_OPEN)
        out.append(before)
        body, closed, rest = after.partition(CALL_CLOSE)
        if not closed:
            out.append("\n\n**Tool call** (being written…)\n")
            rest = ""
            break
        call = parse_call(body.strip())
        out.append(_block(call) if call is not None else CALL_OPEN + body + CALL_CLOSE)
    out.append(rest)
    return "".join(out)


def _block(call: ToolCall) -> str:
    arguments = json.dumps(json.loads(call.arguments), indent=2, ensure_ascii=False)
    return f"\n\n**Tool call** `{call.name}`\n\n```json\n{arguments}\n```\n\n"

"""SamplingParams and prompts as an OpenAI-compatible request body."""
from __future__ import annotations

from ..chat import Continuation, validate_messages
from ..sampling_params import SamplingParams
from ..structured_outputs import StructuredOutputs

# Fields the OpenAI API has, then the extensions vLLM, llama-server and `llmchat serve` accept.
_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty",
           "top_k", "min_p", "repetition_penalty")


def sampling_fields(params: SamplingParams) -> dict:
    """The values the request sets; unset ones are left to the server (the model's own defaults there)."""
    body = {}
    for name in _FIELDS:
        value = getattr(params, name)
        if value is None or (name in ("presence_penalty", "frequency_penalty") and value == 0.0):
            continue
        body[name] = value
    if params.stop:
        body["stop"] = list(params.stop)
    if params.ignore_eos:
        body["ignore_eos"] = True
    return body


def constraint_fields(constraint: StructuredOutputs | None, chat: bool) -> dict:
    """A constrained reply: OpenAI's response_format for JSON in chat (every compatible server reads it), else
    vLLM's structured_outputs (which `llmchat serve` reads too)."""
    if constraint is None:
        return {}
    if chat and constraint.json is not None:
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "reply", "schema": constraint.json, "strict": True}}}
    if chat and constraint.json_object:
        return {"response_format": {"type": "json_object"}}
    fields = {name: getattr(constraint, name) for name in ("json", "regex", "choice", "grammar")
              if getattr(constraint, name) is not None}
    return {"structured_outputs": fields or {"json_object": True}}


def request_body(model_id: str, prompt, params: SamplingParams) -> tuple[str, dict]:
    """(path under base_url, JSON body) for a streamed request: chat messages, a continuation or raw text."""
    body = {"model": model_id, "stream": True, "stream_options": {"include_usage": True}, **sampling_fields(params)}
    chat_constraint = constraint_fields(params.structured_outputs, chat=True)
    if isinstance(prompt, Continuation):
        # vLLM's and llmchat's extension: go on with the last assistant message instead of starting a new one.
        body.update(messages=[*prompt.messages, {"role": "assistant", "content": prompt.partial}],
                    continue_final_message=True, add_generation_prompt=False, **chat_constraint)
        return "/chat/completions", body
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        return "/completions", {**body, **constraint_fields(params.structured_outputs, chat=False), "prompt": prompt}
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, dict) for m in prompt):
        validate_messages(list(prompt))
        return "/chat/completions", {**body, **chat_constraint, "messages": list(prompt)}
    raise ValueError("a remote model takes text or chat messages (token ids need the model's tokenizer)")

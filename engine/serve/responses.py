"""Response bodies: OpenAI's usage (with cached prompt tokens), llama-server's timings, choices, chunks,
logprobs in the chat and legacy completion shapes, and a chat reply's reasoning and tool calls."""
from __future__ import annotations

import json
import time

from .errors import ApiError

FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


def finish_reason(engine_reason: str | None, called_tools: bool = False) -> str | None:
    if engine_reason == "error":
        raise ApiError(500, "the engine failed while generating (see the server log)", code="engine_error")
    if called_tools and engine_reason == "stop":
        return "tool_calls"
    return FINISH_REASONS.get(engine_reason, engine_reason)


def reply_message(content: str, reasoning: str | None, calls: list, with_reasoning: bool) -> dict:
    """A whole chat reply: content (null when the reply is only tool calls), reasoning under both names clients
    read (reasoning_content: vLLM, DeepSeek; reasoning: vLLM's newer name, OpenRouter), tool calls."""
    message: dict = {"role": "assistant", "content": content if (content or not calls) else None}
    if with_reasoning:
        message["reasoning_content"] = message["reasoning"] = reasoning or None
    if calls:
        message["tool_calls"] = [call.as_message() for call in calls]
    return message


def reply_deltas(piece) -> list[dict]:
    """A piece of a streamed reply as chat deltas; tool calls as OpenAI streams them: a call's id, type and
    name (arguments ""), then its arguments."""
    deltas = []
    if piece.reasoning:
        deltas.append({"reasoning_content": piece.reasoning, "reasoning": piece.reasoning})
    if piece.content:
        deltas.append({"content": piece.content})
    for d in piece.call_deltas:
        if d.call is not None:
            deltas.append({"tool_calls": [{"index": d.index, "id": d.call.id, "type": "function",
                                           "function": {"name": d.call.name, "arguments": ""}}]})
        if d.arguments:
            deltas.append({"tool_calls": [{"index": d.index, "function": {"arguments": d.arguments}}]})
    return deltas


def usage(metrics) -> dict:
    prompt, completion = metrics.num_prompt_tokens, metrics.num_generated_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": metrics.num_cached_tokens}}


def timings(metrics) -> dict:
    """llama-server's figures: prompt = up to the first token (queue included), predicted = the decode after;
    draft_n / draft_n_accepted: tokens guessed and guesses held, when the reply guessed (speculative decoding)."""
    cached = metrics.num_cached_tokens
    prompt_n = max(metrics.num_prompt_tokens - cached, 0)
    prompt_s = metrics.ttft or 0.0
    predicted_n = metrics.num_generated_tokens
    decode_s = 0.0
    if metrics.first_token_time is not None and metrics.finish_time is not None:
        decode_s = max(metrics.finish_time - metrics.first_token_time, 0.0)
    guessed = {"draft_n": metrics.num_guessed_tokens, "draft_n_accepted": metrics.num_accepted_guesses} \
        if metrics.num_guessed_tokens else {}
    return {"cache_n": cached, "prompt_n": prompt_n, "prompt_ms": prompt_s * 1e3,
            "prompt_per_token_ms": prompt_s * 1e3 / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n / prompt_s if prompt_s > 0 else 0.0,
            "predicted_n": predicted_n, "predicted_ms": decode_s * 1e3,
            "predicted_per_token_ms": decode_s * 1e3 / (predicted_n - 1) if predicted_n > 1 else 0.0,
            "predicted_per_second": (predicted_n - 1) / decode_s if predicted_n > 1 and decode_s > 0 else 0.0,
            **guessed}


def token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(entries, tokenizer) -> dict:
    def one(token_id: int, logprob: float) -> dict:
        text = token_text(tokenizer, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
    return {"content": [{**one(e.token_id, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]}
                        for e in entries], "refusal": None}


def completion_logprobs(entries, tokenizer, text_offset: int) -> dict:
    tokens, offsets = [], []
    for e in entries:
        tokens.append(token_text(tokenizer, e.token_id))
        offsets.append(text_offset)
        text_offset += len(tokens[-1])
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{token_text(tokenizer, t): lp for t, lp in e.top} for e in entries],
            "text_offset": offsets}


class Envelope:
    """The fields every response and chunk of one request shares."""

    def __init__(self, request_id: str, model: str, chat: bool):
        self.id, self.model, self.chat = request_id, model, chat
        self.created = int(time.time())
        self._text_chunk: dict[bool, tuple[str, str]] = {}

    def text_chunk(self, content: str, with_usage_field: bool = False) -> str:
        """chunk(content) for the common case (text only), from a pre-encoded frame: one small json.dumps
        per token instead of the whole body's."""
        frame = self._text_chunk.get(with_usage_field)
        if frame is None:
            marker = "\u0000TEXT\u0000"
            whole = self.chunk(marker, with_usage_field=with_usage_field)
            head, _, tail = whole.partition(json.dumps(marker))
            frame = self._text_chunk[with_usage_field] = (head, tail)
        return frame[0] + json.dumps(content, ensure_ascii=False) + frame[1]

    def head(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": "llmchat"}

    def choice(self, content: str, reason: str | None, logprobs: dict | None, chunk: bool,
               role: bool = False, message: dict | None = None) -> dict:
        """`message`: the chat message (or delta) itself, when it holds more than text."""
        if not self.chat:
            return {"index": 0, "text": content, "logprobs": logprobs, "finish_reason": reason}
        key = "delta" if chunk else "message"
        if message is None:
            message = {"role": "assistant", "content": content} if (role or not chunk) else (
                {"content": content} if content else {})
        return {"index": 0, key: message, "logprobs": logprobs, "finish_reason": reason}

    def response(self, text: str, reason: str, logprobs: dict | None, metrics, message: dict | None = None) -> dict:
        return {**self.head(False), "choices": [self.choice(text, reason, logprobs, chunk=False, message=message)],
                "usage": usage(metrics), "timings": timings(metrics)}

    def chunk(self, content: str, reason: str | None = None, logprobs: dict | None = None, *,
              role: bool = False, with_usage_field: bool = False, metrics=None, delta: dict | None = None) -> str:
        body = {**self.head(True),
                "choices": [self.choice(content, reason, logprobs, chunk=True, role=role, message=delta)]}
        if with_usage_field:
            body["usage"] = None
        if metrics is not None:
            body["timings"] = timings(metrics)
        return sse(body)

    def usage_chunk(self, metrics) -> str:
        return sse({**self.head(True), "choices": [], "usage": usage(metrics), "timings": timings(metrics)})


def sse(body: dict) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"

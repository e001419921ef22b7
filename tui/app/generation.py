"""Stream one reply from the engine into a ChatMessage. Runs as an asyncio task on the app's loop, but the
engine computes in its own thread: this only awaits deltas, so the UI stays responsive."""
from __future__ import annotations

import time
import uuid
from contextlib import aclosing

from llmchat.engine.remote import is_remote
from llmchat.engine.sampling_params import SamplingParams

from .chat_prompt import reply_prompt
from .chat_state import ChatMessage, ChatSession, ReplyStats
from .engines import EngineManager

# What loading a model or streaming a reply raises on bad input or a broken model: shown as a notice, never
# as a traceback.
EXPECTED_ERRORS = (ValueError, FileNotFoundError, RuntimeError, OSError)


def sampling_params(session: ChatSession):
    """SamplingParams from the session; unset fields stay None so the engine fills the model's defaults."""
    s = session.settings
    params = SamplingParams(max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                            min_p=s.min_p, seed=s.seed, speculative=s.speculative)
    params.validate()
    return params


def stats_from(metrics, started: float, first_token_at: float | None, generated: int) -> ReplyStats:
    """Engine metrics when present, else what the UI measured itself (an aborted request)."""
    if metrics is not None:
        timings = metrics.server_timings or {}
        rate = metrics.decode_tokens_per_s
        if rate is None and metrics.first_token_time is not None and generated >= 2:   # still streaming
            elapsed = time.monotonic() - metrics.first_token_time
            rate = (generated - 1) / elapsed if elapsed > 0 else None
        return ReplyStats(ttft=metrics.ttft, tokens_per_s=rate,
                          num_generated_tokens=metrics.num_generated_tokens or generated,
                          num_prompt_tokens=metrics.num_prompt_tokens, num_cached_tokens=metrics.num_cached_tokens,
                          num_disk_cached_tokens=metrics.num_disk_cached_tokens,
                          server_tokens_per_s=timings.get("predicted_per_second"),
                          guessed_tokens=metrics.num_guessed_tokens, accepted_guesses=metrics.num_accepted_guesses)
    ttft = None if first_token_at is None else first_token_at - started
    return ReplyStats(ttft=ttft, num_generated_tokens=generated)


def finish_reason(engine_reason: str | None, max_tokens: int | None, generated: int, remote: bool) -> str:
    """Why the reply ended, as the chat says it: the engine's "length" is "context" when the reply filled the
    context (or the KV cache) rather than reaching a max the user set. A remote server may also cut at a default
    of its own, so its "length" stays as it is."""
    reason = engine_reason or "stop"
    if reason == "length" and not remote and (max_tokens is None or generated < max_tokens):
        return "context"
    return reason


async def stream_reply(engines: EngineManager, session: ChatSession, reply: ChatMessage, continuing: bool,
                       on_request=lambda engine, request_id: None) -> None:
    """Fill `reply` as deltas arrive; sets finish_reason ("abort" when cancelled) and stats."""
    model = await engines.get(session.settings.model, session.settings.draft_model)
    await engines.ensure_adapter(model, session.settings.adapter)
    params = sampling_params(session)
    prompt = reply_prompt(session, reply, continuing, remote=is_remote(session.settings.model))
    request_id = f"session{session.id}-{uuid.uuid4().hex[:8]}"
    started, first_token_at, generated, last_metrics = time.monotonic(), None, 0, None
    model.active_requests += 1
    try:
        stream = model.engine.generate(prompt, params, adapter=session.settings.adapter, request_id=request_id)
        on_request(model.engine, request_id)     # lets Esc abort in the engine
        async with aclosing(stream):
            async for delta in stream:
                if delta.token_ids and first_token_at is None:
                    first_token_at = time.monotonic()
                generated += len(delta.token_ids)
                reply.content += delta.text
                last_metrics = delta.metrics or last_metrics
                reply.stats = stats_from(last_metrics, started, first_token_at, generated)
                if delta.finished:
                    reply.finish_reason = finish_reason(delta.finish_reason, params.max_tokens,
                                                        reply.stats.num_generated_tokens,
                                                        is_remote(session.settings.model))
    finally:
        model.active_requests -= 1
        if reply.finish_reason is None:      # cancelled (Esc, session deleted, app closing)
            model.engine.abort(request_id)
            reply.finish_reason = "abort"
            reply.stats = stats_from(last_metrics, started, first_token_at, generated)

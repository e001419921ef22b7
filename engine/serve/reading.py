"""Which reader a chat reply needs: reasoning apart when the model's template thinks, tool calls when the request
gives tools; None for a plain reply (streamed on the fast path)."""
from __future__ import annotations

from jinja2 import TemplateError

from ..chat import render_chat
from ..reasoning import CLOSE, OPEN, ReasoningSplitter, template_thinks
from .errors import ApiError
from .reply import ReplyReader
from ..tool_calls import ToolCallParser


def reply_reader(tokenizer, plan) -> ReplyReader | None:
    splitter = None
    if template_thinks(getattr(tokenizer, "chat_template", None)):
        splitter = ReasoningSplitter(in_reasoning=_prompt_opens_reasoning(tokenizer, plan.prompt),
                                     unclosed_is_answer=plan.params.structured_outputs is not None)
    tools = None
    if plan.tools is not None:
        tools = ToolCallParser(plan.tools.style, plan.tools.names, plan.tools.parallel,
                               shaped=plan.tools.constraint is not None)
    if splitter is None and tools is None:
        return None
    return ReplyReader(splitter, tools)


def _prompt_opens_reasoning(tokenizer, prompt) -> bool:
    """A prompt that leaves a <think> open (a template that starts the reasoning itself, or an assistant
    message continued mid-thought): the reply starts inside the reasoning."""
    try:
        rendered = render_chat(tokenizer, prompt)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    return rendered.rfind(OPEN) > rendered.rfind(CLOSE)


def template_takes_kwargs(tokenizer, prompt) -> None:
    """chat_template_kwargs reach the template's code: one that breaks it (a value where the template calls a
    function, a type it cannot add) is the request's error, a 400 naming the parameter, never a 500."""
    try:
        render_chat(tokenizer, prompt)
    except (TemplateError, ValueError):
        raise                      # the messages' own errors, answered as they always are
    except Exception as exc:
        raise ApiError(400, f"the chat template failed with these chat_template_kwargs: {exc}",
                       param="chat_template_kwargs") from None

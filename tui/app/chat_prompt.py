"""What a session sends the engine for a reply: chat messages (with the session's chat template choice and
template switches), or, in raw mode, the conversation as one text the model continues."""
from __future__ import annotations

from llmchat.engine.chat import Continuation, TemplatedChat
from llmchat.engine.chat_templates import template_text

from .chat_state import ChatMessage, ChatSession

RAW = "raw"      # the chat_template setting that sends plain text (base models without a template)
MODELS_OWN = ""  # the chat_template setting that uses the model's own template


def raw_text(session: ChatSession, upto: int) -> str:
    """The system prompt and the messages as one document: a reply continues the text before it directly,
    a new message starts on a new line."""
    text = session.settings.system_prompt + ("\n\n" if session.settings.system_prompt else "")
    previous = None
    for message in session.messages[:upto]:
        if previous is not None and previous.role == "assistant":
            text += "\n"
        text += message.content
        previous = message
    return text


def reply_prompt(session: ChatSession, reply: ChatMessage, continuing: bool, remote: bool = False):
    """The engine prompt for `reply` (continuing: the reply so far is kept and the model goes on)."""
    index = session.messages.index(reply)
    settings = session.settings
    if settings.chat_template == RAW:
        return raw_text(session, index + 1 if continuing else index)
    messages = session.chat_messages(upto=index)
    chat = Continuation(messages, reply.content) if continuing else messages
    if remote:     # a remote server applies its own template
        return chat
    template = template_text(settings.chat_template) if settings.chat_template else None
    kwargs = {"enable_thinking": settings.thinking} if settings.thinking is not None else None
    if template is None and kwargs is None:
        return chat
    return TemplatedChat(chat, template, kwargs)

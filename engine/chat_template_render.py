"""Chat templates rendered as transformers renders them, without importing transformers (~1 s at start).

The environment is transformers' (a sandbox with trim_blocks and lstrip_blocks, loop controls, the
`{% generation %}` tag, and the same tojson, raise_exception, strftime_now, dict and namespace), and so is the
message handling (None-valued keys dropped, reasoning copied under the names templates read). Anything rarer
(continue_final_message, tools given as Python functions) goes to transformers' own renderer. Tests compare both
on every family's template; a tokenizer snapshot is written only after its probe agrees
(engine/tokenizer_snapshot.py).
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def render_chat_template(template: str, messages: list, *, tools=None, documents=None,
                         add_generation_prompt: bool = False, continue_final_message=False, **kwargs) -> str:
    if continue_final_message or (tools is not None and not all(isinstance(t, dict) for t in tools)):
        # transformers (~2 s): only for the cases the renderer below leaves to it
        from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template
        rendered, _ = render_jinja_template(
            conversations=[_normalize_chat_messages(messages)], tools=tools, documents=documents,
            chat_template=template, continue_final_message=continue_final_message,
            add_generation_prompt=add_generation_prompt, **kwargs)
        return rendered[0]
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    chat = []
    for message in _plain(messages):
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        chat.append(message)
    return _compiled(template).render(messages=chat, tools=_plain(tools), documents=_plain(documents),
                                      add_generation_prompt=add_generation_prompt, **_plain(kwargs))


def _plain(value):
    """Only plain JSON-like data reaches the sandbox (transformers' rule: a rich object may carry methods)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


@lru_cache(maxsize=16)
def _compiled(template: str):
    # jinja2 and its sandbox (~80 ms): on the first template compiled, not when the engine is imported
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks: rendered as is."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}.")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(template)

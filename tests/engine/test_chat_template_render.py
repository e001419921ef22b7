"""Chat templates render as transformers renders them (engine/chat_template_render.py against transformers'
render_jinja_template, the reference): tools, reasoning, loop controls, namespaces, the generation tag,
raise_exception and switches such as enable_thinking."""
from __future__ import annotations

import jinja2
import pytest
from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

from llmchat.engine.chat_template_render import render_chat_template

# A Qwen3-like template: tools as JSON, reasoning folded into <think>, the last user turn found with a namespace
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0].content + '\\n' if messages[0].role == 'system' }}"
    "# Tools\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}<|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{%- continue %}{%- endif %}"
    "{%- if m.role not in ['user', 'assistant', 'tool'] %}{{ raise_exception('bad role ' + m.role) }}{%- endif %}"
    "<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'assistant' %}{% generation %}"
    "{%- if m.reasoning_content is defined and loop.index0 > ns.last_user %}<think>{{ m.reasoning_content }}</think>"
    "{%- endif %}{{ m.content }}{%- for call in m.tool_calls | default([]) %}\n<tool_call>{{ call | tojson }}"
    "</tool_call>{%- endfor %}{% endgeneration %}"
    "{%- else %}{{ m.content }}{%- endif %}<|im_end|>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}"
    "{{ bos_token if bos_token is defined else '' }}"
)
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather in a city — café",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
     {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny.", "reasoning": "it said sunny"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "thinking": "t", "tool_calls": None}],
]


def reference(messages, **kwargs) -> str:
    rendered, _ = render_jinja_template(conversations=[_normalize_chat_messages(messages)], chat_template=TEMPLATE,
                                        **kwargs)
    return rendered[0]


@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("kwargs", [{}, {"add_generation_prompt": True}, {"tools": TOOLS},
                                    {"add_generation_prompt": True, "enable_thinking": False, "bos_token": "<s>"}],
                         ids=["plain", "prompt", "tools", "switches"])
def test_render_equals_transformers(chat, kwargs):
    assert render_chat_template(TEMPLATE, CHATS[chat], **kwargs) == reference(CHATS[chat], **kwargs)


def test_the_callers_messages_are_not_changed():
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning": "r", "x": None}]
    before = [dict(m) for m in chat]
    render_chat_template(TEMPLATE, chat)
    assert chat == before


def test_raise_exception_and_the_sandbox_are_transformers():
    with pytest.raises(jinja2.exceptions.TemplateError, match="bad role narrator"):
        render_chat_template(TEMPLATE, [{"role": "narrator", "content": "x"}])
    with pytest.raises(jinja2.exceptions.SecurityError):
        render_chat_template("{{ messages.__class__.__mro__ }}{% set ns = namespace(_x=1) %}", [{"role": "user"}])


def test_continuing_a_final_message_goes_to_transformers_renderer():
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    assert render_chat_template(TEMPLATE, chat, continue_final_message=True) == \
        reference(chat, continue_final_message=True)

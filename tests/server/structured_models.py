"""Tiny models for the structured-output, tool and reasoning tests: the tiny Qwen2 with a chat template that
knows tools (Qwen2.5's format, simplified), and one whose template thinks (it opens <think> itself, as
DeepSeek-R1 distills do, or leaves it to the model, as Qwen3 does)."""
from __future__ import annotations

from pathlib import Path

from tiny_models import make_model, make_tokenizer

TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    "Answer a call as <tool_call>\n{\"name\": <name>, \"arguments\": <object>}\n</tool_call><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{% if message.content %}{{ message.content }}\n{% endif %}"
    "{% for call in message.tool_calls %}<tool_call>\n"
    "{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}\n"
    "</tool_call>{% endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# the prompt opens the reasoning: the reply is "...</think>\n\nanswer"
OPEN_THINK_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'assistant' and message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n"
    "</think>\n\n{% endif %}{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)

# the model opens it: the reply is "<think>\n...\n</think>\n\nanswer"; enable_thinking=false closes an empty one
# in the prompt, as Qwen3's template does
MODEL_THINKS_TEMPLATE = OPEN_THINK_TEMPLATE.replace(
    "assistant\n<think>\n{% endif %}",
    "assistant\n{% set ns = namespace(direct=enable_thinking is defined and enable_thinking is false) %}"
    "{% if ns.direct %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def make_templated_model(path: Path, template: str, arch: str = "qwen2") -> Path:
    # tool declarations are long in the tiny tokenizer's tokens: room for them
    make_model(path, arch, max_position_embeddings=2048)
    tokenizer = make_tokenizer()
    tokenizer.chat_template = template
    tokenizer.save_pretrained(path)
    return path

# Llama 3.x's JSON tool-call form: the reply is {"name": ..., "parameters": {...}}
LLAMA3_TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nAnswer a call as JSON: {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{%- if message.tool_calls %}{% for call in message.tool_calls %}{\"name\": \"{{ call.function.name }}\", "
    "\"parameters\": {{ call.function.arguments | tojson }}}{% endfor %}"
    "{%- else %}{{ message.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

"""Chat templates for models that ship none (base models, many base-model GGUF files): the family's known
format, picked by the marker tokens its vocabulary holds (as llama.cpp does), for a caller that asks for it.
Without one the engine takes raw text only; chat messages raise NoChatTemplateError, which names the template
the vocabulary suggests so a front end can offer it next to raw mode."""
from __future__ import annotations

_BOS = "{{ bos_token or '' }}"
# Gemma has no system role: the system text opens the first user turn.
GEMMA = (_BOS + "{% set system = messages[0]['content'] if messages[0]['role'] == 'system' else '' %}"
         "{% for m in messages if m['role'] != 'system' %}"
         "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
         "{% if loop.first and system %}{{ system }}\n\n{% endif %}{{ m['content'] | trim }}<end_of_turn>\n"
         "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = (_BOS + "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
PHI3 = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
GRANITE = ("{% for m in messages %}<|start_of_role|>{{ m['role'] }}<|end_of_role|>{{ m['content'] }}"
           "<|end_of_text|>\n{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>"
           "{% endif %}")
# Mistral's [INST] format: a system text goes before the first user message.
MISTRAL = (_BOS + "{% set system = messages[0]['content'] if messages[0]['role'] == 'system' else '' %}"
           "{% for m in messages if m['role'] != 'system' %}"
           "{% if m['role'] == 'user' %}[INST] {% if loop.first and system %}{{ system }}\n\n{% endif %}"
           "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token or '' }}{% endif %}{% endfor %}")

# name -> (tokens the vocabulary must hold, template); the first match wins
KNOWN_TEMPLATES: dict[str, tuple[tuple[str, ...], str]] = {
    "gemma": (("<start_of_turn>", "<end_of_turn>"), GEMMA),
    "llama3": (("<|start_header_id|>", "<|eot_id|>"), LLAMA3),
    "granite": (("<|start_of_role|>", "<|end_of_role|>"), GRANITE),
    "phi3": (("<|user|>", "<|assistant|>", "<|end|>"), PHI3),
    "chatml": (("<|im_start|>", "<|im_end|>"), CHATML),
    "mistral": (("[INST]", "[/INST]"), MISTRAL),
}


class NoChatTemplateError(ValueError):
    """Chat messages for a model without a chat template; `suggested` names a known template, or None."""

    def __init__(self, suggested: str | None) -> None:
        self.suggested = suggested
        offer = f", or use the {suggested!r} chat template its vocabulary suggests" if suggested else ""
        super().__init__(f"this model has no chat template (a base model?): send the prompt as raw text{offer}")


def suggested_template(tokenizer) -> str | None:
    """The known template whose marker tokens this tokenizer's vocabulary holds, or None."""
    vocab = tokenizer.get_vocab()
    return next((name for name, (markers, _) in KNOWN_TEMPLATES.items() if all(m in vocab for m in markers)), None)


def template_text(name: str) -> str:
    """A known template by name (see KNOWN_TEMPLATES); ValueError naming the choices otherwise."""
    if name not in KNOWN_TEMPLATES:
        raise ValueError(f"unknown chat template {name!r}; known: {', '.join(KNOWN_TEMPLATES)}")
    return KNOWN_TEMPLATES[name][1]


def use_template(tokenizer, name: str) -> None:
    """Give a tokenizer without a chat template the known one called `name` (its EOS stays the model's)."""
    tokenizer.chat_template = template_text(name)

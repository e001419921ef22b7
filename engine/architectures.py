"""The model architectures the engine runs, as plain data (no torch): the store checks repos and folders
against it before anything is downloaded or loaded."""
from __future__ import annotations

# The engine implements these decoder families (engine/models/); everything else is refused with a reason.
# The same list as engine/models/args.py FAMILIES (a test keeps them equal; this module stays torch-free).
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "GraniteForCausalLM", "Phi3ForCausalLM", "SmolLM3ForCausalLM", "Gemma3ForCausalLM",
                           "Gemma3ForConditionalGeneration")
SUPPORTED_TEXT = ("llmchat's engine runs Llama, Mistral, Qwen2, Qwen3, Granite, Phi-3 / Phi-4-mini, SmolLM3 and "
                  "Gemma 3 (text) models")
# Runs, with something the user should know.
ARCHITECTURE_NOTES = {"Gemma3ForConditionalGeneration": "text only: images are not supported"}

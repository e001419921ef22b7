"""Tiny random-weight models and a small chat tokenizer, built on the spot for tests.

Every architecture the engine supports gets a model small enough to run in milliseconds, saved with
transformers' own `save_pretrained`, so the engine loads exactly what a user would download.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    GraniteConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    SmolLM3Config,
)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. Hello world! How are you today?",
    "Language models run locally on ARM laptops and servers. Paged attention, prefix caching.",
    "def add(a, b):\n    return a + b\n# Python code block\nprint(add(1, 2))",
    "Ünïcödé: café, naïve, 日本語のテキスト, emoji 🙂🚀, Ελληνικά, русский текст.",
    "Once upon a time there was a little engine that could batch many sessions at once.",
]
VOCAB_SIZE = 384  # model vocab; the tokenizer uses fewer ids, which is what real checkpoints do too


@functools.lru_cache(maxsize=None)
def _tokenizer_json() -> str:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok.to_str()


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (real multi-byte UTF-8 splits) with a ChatML template."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _common(**overrides) -> dict:
    tok = make_tokenizer()
    base = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        tie_word_embeddings=False,
    )
    base.update(overrides)
    return base


def config_for(arch: str, **overrides):
    """A tiny config of the given family. `overrides` reach the config class (rope_scaling, tie...)."""
    if arch == "llama":
        return LlamaConfig(**_common(**overrides))
    if arch == "mistral":
        return MistralConfig(**_common(**{"sliding_window": None, **overrides}))
    if arch == "qwen2":
        return Qwen2Config(**_common(**overrides))
    if arch == "qwen3":
        return Qwen3Config(**_common(**{"head_dim": 16, **overrides}))
    if arch == "granite":   # multipliers far from 1, so a missing one changes the replies
        return GraniteConfig(**_common(**{"embedding_multiplier": 4.0, "attention_multiplier": 0.15,
                                          "residual_multiplier": 0.5, "logits_scaling": 3.0, **overrides}))
    if arch == "phi3":      # Phi-4-mini's shape: partial rotary, LongRoPE (short factors below 512 tokens), tied
        common = _common(**overrides)
        n = int(common["hidden_size"] // common["num_attention_heads"] * 0.75) // 2
        short, long = (PHI3_SHORT, PHI3_LONG) if n == 6 else (_ramp(1.0, 3.0, n), _ramp(1.5, 8.0, n))
        return Phi3Config(**{"partial_rotary_factor": 0.75, "original_max_position_embeddings": 512,
                             "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long},
                             **common, "tie_word_embeddings": overrides.get("tie_word_embeddings", True)})
    if arch == "smollm3":   # layer 1 is a NoPE layer
        return SmolLM3Config(**_common(**{"no_rope_layers": [1, 0], **overrides}))
    if arch == "gemma3":    # a local (sliding, window 20) and a global layer, each with its RoPE
        return Gemma3TextConfig(**_common(**{
            "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 20,
            "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": True,
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}},
            **overrides}))
    raise ValueError(f"unknown arch {arch!r}")


def _ramp(lo: float, hi: float, n: int) -> list[float]:
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


PHI3_SHORT = [1.0, 1.1, 1.2, 1.5, 2.0, 3.0]   # one factor per rotary frequency: 16 * 0.75 / 2
PHI3_LONG = [1.5, 2.0, 3.0, 4.0, 6.0, 8.0]
ARCHS = ("llama", "mistral", "qwen2", "qwen3", "granite", "phi3", "smollm3", "gemma3")


def make_model(path: Path, arch: str = "llama", *, seed: int = 0, dtype=torch.float32,
               generation_config: dict | None = None, max_shard_size: str | None = None,
               **overrides) -> Path:
    """Save a random-weight model + tokenizer (+ generation_config) to `path` and return it."""
    path = Path(path)
    torch.manual_seed(seed)
    config = config_for(arch, **overrides)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    # Random init is ~N(0, 0.02): scale matrices up so logits are decisive (greedy ties are rare)
    # and greedy replies vary instead of repeating one token.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
            elif arch == "gemma3":   # its norms start at w = 0: make the (1 + w) scale matter
                p.add_(torch.randn_like(p) * 0.3)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    make_tokenizer().save_pretrained(path)
    gen = dict(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False)
    gen.update(generation_config or {})
    GenerationConfig(**gen).save_pretrained(path)
    return path

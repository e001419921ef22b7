"""config.json for the GGUF families transformers' GGUF reader does not describe (granite, smollm3) or describes
only in part (phi3: partial rotary and LongRoPE, whose factors are tensors; gemma3: local RoPE, window pattern),
read from the file's metadata the way llama.cpp writes it. Other families keep transformers' reader.
transformers is imported inside the function that uses it (seconds): every start imports the store.
"""
from __future__ import annotations


FAMILY_ARCHS = ("granite", "smollm3", "phi3", "gemma3")
GEMMA3_LOCAL_ROPE_BASE = 10000.0   # llama.cpp does not store it: every Gemma 3 uses 10000
GEMMA3_WINDOW_PATTERN = 6          # nor this: one global layer after five local ones


def _tensor(reader, name: str) -> list[float] | None:
    values = reader.read_floats(name)
    return None if values is None else values.reshape(-1).tolist()


def family_config(reader, arch: str):
    """A transformers config object for a GGUF of these families, or None for the others."""
    if arch not in FAMILY_ARCHS:
        return None
    # transformers and the GGUF reader (~2 s): only for a .gguf file of these families
    from transformers import Gemma3TextConfig, GraniteConfig, Phi3Config, SmolLM3Config

    from llmchat.engine.quant.gguf_tensors import field

    def get(key: str, default=None):
        value = field(reader, f"{arch}.{key}")
        return default if value is None else value

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    common = dict(
        vocab_size=int(get("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"])),
        hidden_size=hidden, intermediate_size=int(get("feed_forward_length")),
        num_hidden_layers=int(get("block_count")), num_attention_heads=heads,
        num_key_value_heads=int(get("attention.head_count_kv", heads)),
        max_position_embeddings=int(get("context_length", 2048)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        tie_word_embeddings=all(t.name != "output.weight" for t in reader.tensors),
        bos_token_id=field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=field(reader, "tokenizer.ggml.padding_token_id"),
    )
    theta = float(get("rope.freq_base", 10000.0))
    if arch == "granite":
        return GraniteConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": theta},
                             embedding_multiplier=float(get("embedding_scale", 1.0)),
                             residual_multiplier=float(get("residual_scale", 1.0)),
                             attention_multiplier=float(get("attention.scale", (hidden // heads) ** -0.5)),
                             logits_scaling=float(get("logit_scale", 1.0)))
    if arch == "smollm3":   # llama.cpp's NoPE layers: every fourth, the config default
        return SmolLM3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": theta})
    if arch == "phi3":
        head_dim = hidden // heads
        rope = {"rope_type": "default", "rope_theta": theta,
                "partial_rotary_factor": int(get("rope.dimension_count", head_dim)) / head_dim}
        long, short = _tensor(reader, "rope_factors_long.weight"), _tensor(reader, "rope_factors_short.weight")
        original = get("rope.scaling.original_context_length")
        if long is not None and short is not None:
            rope.update(rope_type="longrope", long_factor=long, short_factor=short,
                        original_max_position_embeddings=int(original or common["max_position_embeddings"]))
            if get("rope.scaling.attn_factor") is not None:
                rope["attention_factor"] = float(get("rope.scaling.attn_factor"))
        return Phi3Config(**common, rope_parameters=rope, sliding_window=get("attention.sliding_window"),
                          original_max_position_embeddings=int(original or common["max_position_embeddings"]))
    head_dim = int(get("attention.key_length", hidden // heads))
    full = {"rope_type": "default", "rope_theta": theta}
    if get("rope.scaling.factor") and field(reader, f"{arch}.rope.scaling.type") in (None, "linear"):
        full.update(rope_type="linear", factor=float(get("rope.scaling.factor")))
    layers = common["num_hidden_layers"]
    pattern = get("attention.sliding_window_pattern")
    pattern = pattern if isinstance(pattern, int) and pattern > 0 else GEMMA3_WINDOW_PATTERN
    # as llama.cpp: Gemma 3 27B (62 layers) scales queries by hidden / heads, the others by head_dim
    scalar = hidden // heads if layers == 62 else head_dim
    return Gemma3TextConfig(
        **common, head_dim=head_dim, query_pre_attn_scalar=scalar, sliding_window=int(get("attention.sliding_window")),
        layer_types=["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": GEMMA3_LOCAL_ROPE_BASE},
                         "full_attention": full})

"""Write a tiny Hugging Face model folder as a GGUF file, as llama.cpp's converter would, with a chosen GGUF
type per tensor role, for the quantized-model tests.

llama, granite and smollm3 files get llama.cpp's q/k row permutation; qwen2 files carry q/k/v biases and qwen3
files q/k norms; phi3 files keep the fused attn_qkv and ffn_up (gate and up) with LongRoPE's factors as tensors;
gemma3 files have four norms per layer stored as 1 + w, as llama.cpp's converter writes them.
The byte-level BPE tokenizer goes in as a "gpt2" GGUF tokenizer with its merges and the chat template.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType, TokenType
from safetensors.numpy import load_file

from llmchat.engine.quant.gguf_blocks import BLOCKS
from llmchat.engine.quant.quantize import quantize_blocks, type_for

LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
# per architecture, names that differ from LAYER_NAMES
ARCH_LAYER_NAMES = {
    "phi3": {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"},
    "gemma3": {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"},
}
GGUF_ARCH = {"gemma3_text": "gemma3"}            # model_type -> GGUF architecture where they differ
PERMUTED = ("llama", "granite", "smollm3")
FAMILIES = ("llama", "qwen2", "qwen3")   # the GGUF architectures the tests write
NEW_FAMILIES = ("granite", "phi3", "smollm3", "gemma3")   # issue 18
K_QUANTS = {"Q4_K": ((0, 2), (2, 4)), "Q5_K": ((0, 2), (2, 4)), "Q6_K": ((208, 210),)}  # their fp16 fields
# tensor role -> GGUF type of the Q4_K_M-like mix most tests use
MIXED = {"embd": "Q8_0", "output": "Q6_K", "attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K",
         "attn_output": "Q5_K", "ffn_gate": "Q4_0", "ffn_up": "Q4_1", "ffn_down": "Q5_0", "attn_qkv": "Q4_K"}


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp stores q/k rows interleaved for its rotary layout."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _family_metadata(w: GGUFWriter, arch: str, cfg: dict) -> None:
    """What llama.cpp's converter writes for the newer families beyond the llama keys."""
    rope = cfg.get("rope_parameters") or {}
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if arch == "granite":
        w.add_embedding_scale(cfg["embedding_multiplier"])
        w.add_residual_scale(cfg["residual_multiplier"])
        w.add_attention_scale(cfg["attention_multiplier"])
        w.add_logit_scale(cfg["logits_scaling"])
    elif arch == "phi3":
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 1.0)))
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        factor = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
        w.add_rope_scaling_attn_factors(1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) /
                                                                          math.log(cfg["original_max_position_embeddings"])))
        if cfg.get("sliding_window"):
            w.add_sliding_window(cfg["sliding_window"])
    elif arch == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
        full = rope.get("full_attention", {})
        if full.get("rope_type") == "linear":
            w.add_rope_scaling_type(RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])


def _metadata(w: GGUFWriter, cfg: dict, folder: Path, chat_template: bool) -> None:
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    template = (folder / "chat_template.jinja").read_text() if (folder / "chat_template.jinja").exists() \
        else tok_cfg.get("chat_template")
    w.add_name("tiny")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    if cfg.get("head_dim"):
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rope = cfg.get("rope_parameters") or {}
    rope = rope.get("full_attention", rope)             # gemma3: the global layers' base
    w.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_vocab_size(cfg["vocab_size"])
    vocab = tok["model"]["vocab"]
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    tokens, types = [""] * cfg["vocab_size"], [TokenType.UNUSED] * cfg["vocab_size"]
    for text, i in {**vocab, **specials}.items():
        tokens[i] = text
        types[i] = TokenType.CONTROL if text in specials else TokenType.NORMAL
    tokens = [t or f"[PAD{i}]" for i, t in enumerate(tokens)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)
    if template and chat_template:
        w.add_chat_template(template)


def write_gguf(folder: Path, out: Path, types: dict[str, str] | None = None, arch: str | None = None,
               chat_template: bool = True) -> Path:
    """folder: a tiny HF model (tiny_models.make_model); types: role -> GGUF type name (F32, F16, Q8_0, ...),
    roles missing from it stay F32. Returns `out`."""
    cfg = json.loads((folder / "config.json").read_text())
    arch = arch or GGUF_ARCH.get(cfg["model_type"], cfg["model_type"])
    types = types or {}
    w = GGUFWriter(str(out), arch)
    _metadata(w, cfg, folder, chat_template)
    _family_metadata(w, arch, cfg)
    state = load_file(str(folder / "model.safetensors"))

    def put(name: str, arr: np.ndarray, role: str) -> None:
        arr = np.ascontiguousarray(arr.astype(np.float32))
        kind = types.get(role, "F32") if arr.ndim == 2 else "F32"
        if kind not in ("F32", "F16"):
            kind = type_for(kind, arr.shape[1]) or "F32"   # rows that are not whole blocks: llama.cpp's fallback
        if kind == "F32":
            w.add_tensor(name, arr)
        elif kind == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            qtype = GGMLQuantizationType[kind]
            w.add_tensor(name, quantize_blocks(arr, kind), raw_dtype=qtype)

    put("token_embd.weight", state["model.embed_tokens.weight"], "embd")
    rope = cfg.get("rope_parameters") or {}
    if rope.get("rope_type") == "longrope":
        w.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], dtype=np.float32))
    names = {**LAYER_NAMES, **ARCH_LAYER_NAMES.get(arch, {})}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            for suffix in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{suffix}"
                if key not in state:
                    continue
                arr = state[key]
                if arch == "gemma3" and hf.endswith("norm"):
                    arr = arr + 1.0
                if arch in PERMUTED and gg in ("attn_q", "attn_k"):
                    heads = cfg["num_attention_heads"] if gg == "attn_q" else cfg["num_key_value_heads"]
                    arr = _permute(arr, heads)
                put(f"blk.{i}.{gg}.{suffix}", arr, gg)
    put("output_norm.weight", state["model.norm.weight"] + (1.0 if arch == "gemma3" else 0.0), "norm")
    if "lm_head.weight" in state and not cfg.get("tie_word_embeddings"):
        put("output.weight", state["lm_head.weight"], "output")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def random_k_blocks(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """Random bytes for every field of K-quant blocks, with the fp16 super-block factors set to finite values."""
    rng = np.random.default_rng(seed)
    elems, size = BLOCKS[type_name]
    blocks = rng.integers(0, 256, (rows * cols // elems, size), dtype=np.uint8)
    for lo, hi in K_QUANTS[type_name]:
        blocks[:, lo:hi] = rng.uniform(1e-4, 0.05, (blocks.shape[0], 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)

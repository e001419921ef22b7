"""Write a tiny llama GGUF (like llama.cpp's converter would) from a tiny HF model folder, for import tests.

Tensors get llama.cpp's q/k permutation; attention/MLP matrices are Q8_0-quantized, the output head F16,
norms and embeddings F32, so dequantization of several types is exercised. The byte-level BPE tokenizer
goes in as a "gpt2" GGUF tokenizer with its merges and the ChatML chat template.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import quantize
from safetensors.numpy import load_file

LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp stores q/k rows interleaved for its rotary layout."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(folder: Path, out: Path) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    template = (folder / "chat_template.jinja").read_text() if (folder / "chat_template.jinja").exists() \
        else tok_cfg["chat_template"]
    w = GGUFWriter(str(out), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_vocab_size(cfg["vocab_size"])
    vocab = tok["model"]["vocab"]
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    tokens = [""] * cfg["vocab_size"]
    types = [TokenType.UNUSED] * cfg["vocab_size"]
    for text, i in {**vocab, **specials}.items():
        tokens[i] = text
        types[i] = TokenType.CONTROL if text in specials else TokenType.NORMAL
    for i, t in enumerate(tokens):
        if not t:
            tokens[i] = f"[PAD{i}]"
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    state = load_file(str(folder / "model.safetensors"))

    def put(name: str, arr: np.ndarray, qtype=GGMLQuantizationType.F32):
        arr = np.ascontiguousarray(arr.astype(np.float32))
        if qtype == GGMLQuantizationType.F32:
            w.add_tensor(name, arr)
        elif qtype == GGMLQuantizationType.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)

    put("token_embd.weight", state["model.embed_tokens.weight"])
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in LAYER_NAMES.items():
            arr = state[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                arr = _permute(arr, cfg["num_attention_heads"])
            elif hf == "self_attn.k_proj":
                arr = _permute(arr, cfg["num_key_value_heads"])
            qtype = GGMLQuantizationType.F32 if arr.ndim == 1 else GGMLQuantizationType.Q8_0
            put(f"blk.{i}.{gg}.weight", arr, qtype)
    put("output_norm.weight", state["model.norm.weight"])
    put("output.weight", state["lm_head.weight"], GGMLQuantizationType.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out

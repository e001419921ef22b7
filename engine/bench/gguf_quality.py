"""The quantized-model parts of `llmchat bench`: next-token quality against the fp32 dequantized model over a
fixed text (KL divergence, top-1 agreement), and the same file through llama.cpp (llama-cpp-python) in the
same run when it is installed: decode and prefill tok/s and its quality, reported as ratios.

llama.cpp runs in its own process (its own interpreter if LLMCHAT_LLAMACPP_PYTHON names one, e.g. a venv where
llama-cpp-python was built), like the transformers baseline.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..model_loader import read_config
from ..quant.gguf_export import dense_tensors
from ..quant.gguf_tensors import field, open_reader
from ..quant.quality import TEXT, compare, sequence_logits
from .common import baseline_env

LLAMACPP_CODE = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
a = json.loads(sys.argv[1])
llm = Llama(model_path=a["gguf"], n_ctx=a["n_ctx"], n_threads=a["threads"], n_threads_batch=a["threads"],
            n_batch=512, logits_all=True, verbose=False)
def timed_eval(ids):
    t0 = time.perf_counter(); llm.eval(ids); return time.perf_counter() - t0
fig = {}
timed_eval(a["prompt"][:8]); llm.reset()                                   # warm-up
best = 0.0
for _ in range(3):
    llm.reset(); llm.eval(a["prompt"])
    t0 = time.perf_counter()
    for _ in range(a["new_tokens"]):
        llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
    best = max(best, a["new_tokens"] / (time.perf_counter() - t0))
fig["decode_tok_s_1"] = best
llm.reset()
fig["prefill_tok_s"] = len(a["prefix"]) / timed_eval(a["prefix"])
llm.reset(); llm.eval(a["text"])
np.save(a["scores_out"], np.asarray(llm.scores[:len(a["text"])], dtype=np.float32))
print(json.dumps(fig))
"""


def llamacpp_python() -> str | None:
    """The interpreter that has llama_cpp, or None."""
    explicit = os.environ.get("LLMCHAT_LLAMACPP_PYTHON")
    if explicit:
        return explicit
    return sys.executable if importlib.util.find_spec("llama_cpp") else None


def text_ids(llm) -> list[int]:
    """The quality text's tokens, cut to the model's context (one prefill step must hold them all)."""
    return llm.tokenizer(TEXT)["input_ids"][:llm.engine.max_model_len]


def reference_bytes(gguf: Path) -> int:
    """Memory the fp32 reference takes at its peak: the dequantized state dict and the model built from it."""
    return 2 * 4 * sum(t.n_elements for t in open_reader(gguf).tensors)


def reference_fits(gguf: Path, free: int | None = None) -> tuple[bool, str]:
    """Whether the fp32 reference fits in `free` bytes (default: the memory free now; a 7B model's reference
    needs ~60 GB), and why not."""
    import psutil

    need = reference_bytes(gguf)
    free = psutil.virtual_memory().available if free is None else free
    if need <= free:
        return True, ""
    return False, f"its fp32 reference needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB free"


def reference_logits(gguf: Path, folder: Path, ids: list[int]) -> torch.Tensor:
    """fp32 logits of the GGUF dequantized, in transformers (the quality reference). The weights come from the
    engine's own reader (gguf_export.dense_tensors), so every family the engine runs from a GGUF has one, also
    those transformers' GGUF reader does not know (granite, smollm3); folder: the model's library folder."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig   # seconds to import: only for this reference

    reader = open_reader(gguf)
    arch = field(reader, "general.architecture")
    state = {name: t for name, t, _ in dense_tensors(reader, read_config(folder), arch, torch.float32)}
    config = AutoConfig.from_pretrained(str(folder))
    config.tie_word_embeddings = "lm_head.weight" not in state   # the file decides, as in the --dequantize import
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]   # the Auto class refuses a state dict beside a folder
    model = model_class.from_pretrained(None, config=config, state_dict=state, dtype=torch.float32).eval()
    del state
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


def quality(llm, reference: torch.Tensor, ids: list[int]) -> dict:
    return compare(reference, sequence_logits(llm, ids))


def llamacpp_figures(gguf: Path, prompt: list[int], prefix: list[int], new_tokens: int, ids: list[int],
                     reference: torch.Tensor) -> dict:
    """llama.cpp's decode/prefill tok/s on the same file and prompts, and its quality; {"error": ...} if it fails."""
    python = llamacpp_python()
    if python is None:
        return {"error": "llama-cpp-python is not installed (or set LLMCHAT_LLAMACPP_PYTHON)"}
    with tempfile.TemporaryDirectory() as tmp:
        scores = Path(tmp) / "scores.npy"
        args = dict(gguf=str(gguf), threads=torch.get_num_threads(), prompt=prompt, prefix=prefix,
                    new_tokens=new_tokens, text=ids, scores_out=str(scores),
                    n_ctx=max(len(prefix), len(prompt) + new_tokens, len(ids)) + 16)
        done = subprocess.run([python, "-c", LLAMACPP_CODE, json.dumps(args)], capture_output=True, text=True,
                              env=baseline_env())
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            return {"error": f"llama.cpp failed: {tail[0]}"}
        fig = json.loads(done.stdout.strip().splitlines()[-1])
        fig["quality"] = compare(reference, torch.from_numpy(np.load(scores)))
    return fig

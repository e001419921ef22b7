"""LoRA test helpers: random non-zero PEFT adapters saved with peft itself, and the transformers+peft
greedy reference the engine must match token for token."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# a checkpoint with fused projections (Phi-3) is adapted on them: q/k/v -> qkv_proj, gate/up -> gate_up_proj
FUSED_PARENT = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
PROMPTS = [[5, 17, 42, 99, 120, 7, 8, 9], [33, 34, 35, 200, 201, 12], [250, 3, 77, 140, 141, 142, 143, 60, 61, 62]]


def make_adapter(model_dir: Path, out_dir: Path, *, r: int = 8, alpha: float = 16,
                 targets=ALL_PROJECTIONS, seed: int = 1, scale: float = 3.0, **lora_kwargs) -> Path:
    """Random LoRA (A and B non-zero) on `targets`, saved by peft's save_pretrained."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = list(dict.fromkeys(t if t in names else FUSED_PARENT[t] for t in targets))
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, init_lora_weights=False,
                        **lora_kwargs)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():   # peft's random init is small; scale up so the adapter changes greedy outputs
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.mul_(scale)
    peft_model.save_pretrained(out_dir)
    return Path(out_dir)


def hf_greedy(model_dir: Path, adapter_dir: Path | None, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers (+ peft loading the adapter folder itself) greedy continuation, fp32."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt):].tolist()


def edit_config(adapter_dir: Path, **changes) -> None:
    path = Path(adapter_dir) / "adapter_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@dataclass
class StepSeq:
    """The one field of a sequence LoraManager.set_step / group_chunks read."""
    adapter_slot: int


@dataclass
class StepChunk:
    """A scheduled chunk as the LoRA manager sees it: its sequence and how many tokens it adds."""
    seq: StepSeq
    num_new_tokens: int = 1

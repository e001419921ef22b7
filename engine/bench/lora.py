"""LoRA throughput benchmark: N sessions spread over K adapters vs N sessions on the base model, in one run.

`llmchat bench MODEL --lora` runs it. `run(model_path)` builds one engine, loads K adapters (given folders, or
random PEFT-format adapters written here on every projection), and alternates base and adapter rounds of the same N prompts,
so both sides see the same machine state. Prefix caching is off so no round reuses another's prefill.
Figures are aggregate generated tokens/s (prefill included), best round of each side, and their ratio.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..llm import LLM
from ..lora.adapter import PROJECTIONS
from ..sampling_params import SamplingParams

_GROUP = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
          "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def write_random_adapter(folder: Path, shapes: dict[tuple[int, str], tuple[int, int]], rank: int, seed: int,
                         base_model: str | None = None, alpha: float | None = None) -> Path:
    """A PEFT-format LoRA folder with random non-zero A and B on every projection in `shapes`."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for (layer, proj), (in_f, out_f) in sorted(shapes.items()):
        key = f"base_model.model.model.layers.{layer}.{_GROUP[proj]}.{proj}"
        tensors[f"{key}.lora_A.weight"] = torch.randn(rank, in_f, generator=g) / in_f ** 0.5
        tensors[f"{key}.lora_B.weight"] = torch.randn(out_f, rank, generator=g) * 0.01
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha or 2 * rank, "target_modules": list(PROJECTIONS),
              "base_model_name_or_path": base_model, "bias": "none", "task_type": "CAUSAL_LM"}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return folder


def _prompts(sessions: int) -> list[list[dict]]:
    topics = ["the sea", "mountains", "a robot", "coffee", "trains", "a lighthouse", "winter", "music",
              "bees", "the moon", "a library", "rain", "chess", "bread", "a volcano", "maps"]
    return [[{"role": "user", "content": f"Write a short story about {topics[i % len(topics)]} (#{i})."}]
            for i in range(sessions)]


def run(model_path, *, sessions: int = 8, num_adapters: int = 4, rank: int = 16, new_tokens: int = 64,
        rounds: int = 3, adapter_dirs: list[Path] | None = None, **engine_kwargs) -> dict:
    """Best rounds of N sessions over K adapters and of N base sessions (alternated), and their ratios."""
    engine_kwargs.setdefault("enable_prefix_caching", False)
    llm = LLM(model_path, **engine_kwargs)
    lora = llm.engine.lora
    with tempfile.TemporaryDirectory(prefix="llmchat-lora-bench-") as tmp:
        dirs = list(adapter_dirs or [])
        for i in range(len(dirs), num_adapters):
            dirs.append(write_random_adapter(Path(tmp) / f"bench{i}", lora.spec.shapes, rank, seed=i))
        names = [f"bench{i}" for i in range(len(dirs))]
        for name, folder in zip(names, dirs):
            llm.load_adapter(name, folder)
    prompts = _prompts(sessions)
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    per_session = [names[i % len(names)] for i in range(sessions)]
    llm.generate(prompts[:2], SamplingParams(max_tokens=4), adapter=per_session[:2])   # warm up

    def timed(adapter) -> float:
        start = time.perf_counter()
        outs = llm.generate(prompts, params, adapter=adapter)
        return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - start)

    base_rounds, lora_rounds = [], []
    for _ in range(rounds):                      # alternate, so drift in machine load hits both sides
        base_rounds.append(timed(None))
        lora_rounds.append(timed(per_session))
    base, lora_ = max(base_rounds), max(lora_rounds)
    base_median, lora_median = statistics.median(base_rounds), statistics.median(lora_rounds)
    return {"sessions": sessions, "adapters": len(names), "rank": rank, "new_tokens": new_tokens,
            "base_tok_s": base, "lora_tok_s": lora_, "base_rounds": base_rounds, "lora_rounds": lora_rounds,
            "ratio": lora_ / base if base else 0.0,
            "median_ratio": lora_median / base_median if base_median else 0.0}


def format_report(r: dict) -> str:
    return (f"LoRA: {r['sessions']} sessions over {r['adapters']} adapters (rank {r['rank']}, all projections) "
            f"{r['lora_tok_s']:.1f} tok/s vs {r['sessions']} base sessions {r['base_tok_s']:.1f} tok/s: "
            f"{100 * r['ratio']:.0f}% of base, best rounds ({100 * r['median_ratio']:.0f}% by medians; "
            f"{r['new_tokens']} new tokens per session; rounds base "
            f"{', '.join(f'{x:.0f}' for x in r['base_rounds'])} / lora "
            f"{', '.join(f'{x:.0f}' for x in r['lora_rounds'])})")

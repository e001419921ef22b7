"""The standard compare run of the end-to-end tests: both tiny models plus the adapter on tiny-llama,
sampled (not greedy) with a fixed seed, so determinism is tested on the sampling path."""
from __future__ import annotations

from pathlib import Path

RUN_SETTINGS = ["--max-tokens", "6", "--temperature", "0.8", "--top-k", "20", "--seed", "7", "--kv-cache-gb", "0.02"]


def compare_argv(models: dict[str, Path], adapter: Path, prompts: Path) -> list[str]:
    return ["compare", "--models", str(models["llama"]), str(models["qwen"]),
            "--adapters", f"{models['llama']}={adapter}", "--prompts", str(prompts), *RUN_SETTINGS]

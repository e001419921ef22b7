"""`llmchat bench MODEL --lora` runs base and adapter rounds in one engine; its random adapters are real LoRA."""
from __future__ import annotations

import json

from lora_helpers import PROMPTS

from llmchat.engine import LLM, SamplingParams
from llmchat.engine.bench.lora import write_random_adapter
from llmchat.tui.cli import main as cli_main


def test_bench_lora_flag_reports_both_sides_and_their_ratio(tiny_model_dir, capsys):
    model = tiny_model_dir("llama")
    code = cli_main(["bench", str(model), "--lora", "--lora-adapters", "2", "--lora-rank", "4", "--sessions", "4",
                     "--tokens", "3", "--dtype", "float32", "--kv-cache-gb", "0.05", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sessions"] == 4 and result["adapters"] == 2 and result["rank"] == 4
    assert len(result["base_rounds"]) == len(result["lora_rounds"]) == 3
    assert result["base_tok_s"] > 0 and result["lora_tok_s"] > 0
    assert result["ratio"] == result["lora_tok_s"] / result["base_tok_s"]


def test_random_bench_adapter_loads_and_changes_outputs(tiny_model_dir, tmp_path):
    model = tiny_model_dir("llama")
    llm = LLM(model, attention_backend="torch")
    folder = write_random_adapter(tmp_path / "rand", llm.engine.lora.spec.shapes, rank=4, seed=0, alpha=256)
    llm.load_adapter("rand", folder)
    params = SamplingParams(max_tokens=6, temperature=0)
    with_adapter = llm.generate(PROMPTS, params, adapter="rand")
    base = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in with_adapter] != [o.token_ids for o in base]

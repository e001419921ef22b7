"""Serving many adapters with few slots: LRU eviction and transparent reload, limits, metrics, unload, and
`llmchat run --adapter`."""
from __future__ import annotations

import pytest
from lora_helpers import PROMPTS, hf_greedy, make_adapter

from llmchat.engine import LLM, SamplingParams
from llmchat.tui.cli import main as cli_main

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


@pytest.fixture(scope="module")
def three(tiny_model_dir, tmp_path_factory):
    model = tiny_model_dir("qwen2")
    tmp = tmp_path_factory.mktemp("lora-serving")
    return model, {n: make_adapter(model, tmp / n, seed=s, r=4) for n, s in (("a", 21), ("b", 22), ("c", 23))}


def test_evicted_adapter_is_reloaded_on_demand_with_the_same_outputs(three):
    model, adapters = three
    llm = LLM(model, attention_backend="torch", max_adapters=2)
    for name, folder in adapters.items():
        llm.load_adapter(name, folder)
    assert llm.metrics().adapters_resident == ["b", "c"]           # a was least recently used
    for name in ("a", "b", "a", "c"):
        out = llm.generate([PROMPTS[0]], GREEDY, adapter=name)[0]
        assert out.token_ids == hf_greedy(model, adapters[name], PROMPTS[0], 6), name
        assert name in llm.metrics().adapters_resident
        assert len(llm.metrics().adapters_resident) == 2
    both = llm.generate([PROMPTS[1], PROMPTS[1]], GREEDY, adapter=["a", "c"])
    assert [o.token_ids for o in both] == [hf_greedy(model, adapters[n], PROMPTS[1], 6) for n in ("a", "c")]


def test_more_adapters_in_one_batch_than_slots_is_a_clear_error(three):
    model, adapters = three
    llm = LLM(model, attention_backend="torch", max_adapters=2)
    for name, folder in adapters.items():
        llm.load_adapter(name, folder)
    with pytest.raises(ValueError, match="adapter slots"):
        llm.generate(PROMPTS, GREEDY, adapter=["a", "b", "c"])
    # Nothing is left half-running: the next batch runs alone and right.
    out = llm.generate([PROMPTS[2]], GREEDY, adapter="c")[0]
    assert out.token_ids == hf_greedy(model, adapters["c"], PROMPTS[2], 6)
    assert llm.metrics().num_running == 0


def test_memory_budget_limits_resident_adapters(three):
    model, adapters = three
    llm = LLM(model, attention_backend="torch", adapter_memory_gb=40_000 / 2**30)   # ~1.5 tiny adapters
    llm.load_adapter("a", adapters["a"])
    llm.load_adapter("b", adapters["b"])
    assert llm.metrics().adapters_resident == ["b"]
    assert llm.engine.lora.registry.used_bytes() <= 40_000


def test_unload_forgets_the_adapter_and_frees_its_slot(three):
    model, adapters = three
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("a", adapters["a"])
    base = llm.generate([PROMPTS[0]], GREEDY)[0].token_ids
    llm.unload_adapter("a")
    assert llm.metrics().adapters_resident == []
    assert llm.engine.lora.registry.used_bytes() == 0
    with pytest.raises(ValueError, match="not loaded"):
        llm.generate([PROMPTS[0]], GREEDY, adapter="a")
    assert llm.generate([PROMPTS[0]], GREEDY)[0].token_ids == base


def test_running_requests_are_counted_per_adapter(three):
    model, adapters = three
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("a", adapters["a"])
    llm.load_adapter("b", adapters["b"])
    engine = llm.engine
    for adapter in ("a", "a", "b", None):
        engine.add_request(PROMPTS[0], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True), adapter=adapter)
    engine.step()
    snap = llm.metrics()
    assert snap.running_per_adapter == {"a": 2, "b": 1} and snap.num_running == 4
    assert snap.adapters_resident == ["a", "b"]
    while engine.has_unfinished():
        engine.step()
    assert llm.metrics().running_per_adapter == {}
    assert all(r is None or r.pins == 0 for r in engine.lora.registry.slots)   # every pin released


def test_cli_run_with_adapter(three, capsys):
    model, adapters = three
    code = cli_main(["run", str(model), "Hello there", "--adapter", str(adapters["b"]), "--max-tokens", "6",
                     "--temperature", "0", "--attention", "torch"])
    assert code == 0
    printed = capsys.readouterr().out.rstrip("\n")
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("b", adapters["b"])
    chat = [{"role": "user", "content": "Hello there"}]
    params = SamplingParams(max_tokens=6, temperature=0)
    assert printed == llm.generate(chat, params, adapter="b")[0].text
    assert printed != llm.generate(chat, params)[0].text


def test_cli_run_with_a_bad_adapter_prints_an_error(three, tmp_path, capsys):
    model, _ = three
    (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "use_dora": true}')
    code = cli_main(["run", str(model), "Hi", "--adapter", str(tmp_path), "--attention", "torch"])
    err = capsys.readouterr().err
    assert code == 2 and "llmchat: error:" in err and "DoRA" in err and "Traceback" not in err


def test_adapter_resolved_by_model_store_name(three, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    from llmchat.engine.store import ModelStore
    model, adapters = three
    entry = ModelStore().import_path(adapters["a"])
    assert entry.kind == "adapter"
    llm = LLM(model, attention_backend="torch")
    llm.load_adapter("mine", entry.name)
    out = llm.generate([PROMPTS[0]], GREEDY, adapter="mine")[0]
    assert out.token_ids == hf_greedy(model, adapters["a"], PROMPTS[0], 6)

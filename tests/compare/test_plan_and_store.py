"""Variants from --models/--adapters, settings hashing, and the resumable results file."""
import json

import pytest

from llmchat.engine.compare.plan import CompareSettings, Variant, build_variants
from llmchat.engine.compare.store import ResultStore, record_key


def test_variants_base_then_adapters_with_unique_ids():
    variants = build_variants(["a", "b"], ["a=/x/my-lora", "a=/y/my-lora/", "b=rel/other"])
    assert variants == [Variant("a", "a"), Variant("a+my-lora", "a", "/x/my-lora"),
                        Variant("a+my-lora#2", "a", "/y/my-lora/"), Variant("b", "b"),
                        Variant("b+other", "b", "rel/other")]
    assert variants[1].adapter_name == "a+my-lora" and variants[0].adapter_name is None


def test_variants_errors():
    with pytest.raises(ValueError, match="MODEL=ADAPTER_PATH"):
        build_variants(["a"], ["no-equals"])
    with pytest.raises(ValueError, match="'c' is not one of --models"):
        build_variants(["a"], ["c=/p"])
    with pytest.raises(ValueError, match="at least one model"):
        build_variants([])


def test_settings_hash_and_validation():
    base = CompareSettings()
    assert base.output_hash() == CompareSettings(kv_cache_gb=2.0).output_hash()   # memory only
    assert base.output_hash() != CompareSettings(seed=1).output_hash()
    assert base.output_hash() != CompareSettings(temperature=0.7).output_hash()
    assert base.sampling_params(3).seed == 3
    with pytest.raises(ValueError, match="temperature"):
        CompareSettings(temperature=-1).validate()
    with pytest.raises(ValueError, match="max_tokens"):
        CompareSettings(max_tokens=0).validate()


def rec(i, model="m", text="t"):
    return {"model": model, "adapter": None, "prompt_index": i, "prompt_hash": f"h{i}", "settings_hash": "s",
            "text": text}


def test_store_round_trip_and_later_record_wins(tmp_path):
    path = tmp_path / "out" / "results.jsonl"
    store = ResultStore(path).load()
    assert store.records == {}
    store.append([rec(0), rec(1)])
    store.append([rec(1, text="newer")])
    again = ResultStore(path).load()
    assert len(again.records) == 2
    assert again.get(record_key(rec(1)))["text"] == "newer"


def test_store_drops_torn_last_line_and_keeps_appending_cleanly(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps(rec(0)) + "\n"
    path.write_text(good + json.dumps(rec(1))[:25], encoding="utf-8")    # killed mid-write
    store = ResultStore(path).load()
    assert list(store.records) == [record_key(rec(0))]
    assert path.read_text(encoding="utf-8") == good
    store.append([rec(1)])
    assert len(ResultStore(path).load().records) == 2


def test_store_complete_last_record_without_newline_is_kept(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec(0)) + "\n" + "garbage line\n" + json.dumps(rec(1)), encoding="utf-8")
    store = ResultStore(path).load()
    assert len(store.records) == 2 and store.skipped_lines == 1
    store.append([rec(2)])
    assert len(ResultStore(path).load().records) == 3


def test_local_folders_are_labelled_by_name(tmp_path):
    (tmp_path / "one" / "model").mkdir(parents=True)
    (tmp_path / "two" / "model").mkdir(parents=True)
    first, second = str(tmp_path / "one" / "model"), str(tmp_path / "two" / "model") + "/"
    variants = build_variants([first, second, "org/hub-model"], [f"{second}=ad/v1", "model=ad/v2"])
    assert [v.id for v in variants] == ["model", "model+v2", "model#2", "model#2+v1", "org/hub-model"]
    assert variants[2].model == second        # the model is kept exactly as given
    assert variants[1] == Variant("model+v2", first, "ad/v2")     # matched by its short label

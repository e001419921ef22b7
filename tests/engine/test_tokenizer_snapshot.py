"""A model's tokenizer comes back from its snapshot (engine/tokenizer_snapshot.py) exactly as transformers builds
it: the same ids, text and chat prompts, on every family's tokenizer; never from a stale or damaged snapshot."""
from __future__ import annotations

import os
import shutil

import pytest
from gguf_models import FAMILIES, write_gguf
from real_model import smollm2_folder
from tiny_models import ARCHS
from transformers import AutoTokenizer

from llmchat.engine.chat import load_tokenizer
from llmchat.engine.quant.gguf_tensors import open_reader
from llmchat.engine.store.gguf_hf import hf_config, hf_tokenizer
from llmchat.engine.tokenizer_snapshot import SnapshotTokenizer, load_snapshot, probe_mismatch, snapshot_key

TEXTS = ["Hello world, 12345 <|im_end|> café\n\tnext line", "  spaces  and\n\nnewlines ", "emoji 🙂 日本語 don't ."]
CHATS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello.", "reasoning_content": "greet back"}, {"role": "user", "content": "Bye"}],
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache root of this test only: the first load is always the cold one."""
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokenizers"


def assert_same(ours, theirs) -> None:
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.all_special_ids == theirs.all_special_ids
    assert ours.get_vocab() == theirs.get_vocab()
    for text in TEXTS:
        for add in (True, False):
            ids = theirs(text, add_special_tokens=add).input_ids
            assert ours(text, add_special_tokens=add).input_ids == ids
            for skip in (True, False):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    if theirs.chat_template:
        for chat in CHATS:
            for prompt in (True, False):
                assert ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt) == \
                    theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)


def gguf_folder(source, out):
    """A model folder whose tokenizer is the one a GGUF registration writes (transformers' class for the
    family: Qwen2Tokenizer, LlamaTokenizer...)."""
    path = write_gguf(source, out / "model.gguf")
    config = hf_config(open_reader(path))
    config.save_pretrained(out)
    hf_tokenizer(path, config.model_type).save_pretrained(out)
    return out


def folders():
    yield from ((f"tiny-{arch}", lambda get, tmp, a=arch: get(a)) for arch in ARCHS[:2])
    yield from ((f"gguf-{family}", lambda get, tmp, f=family: gguf_folder(get(f), tmp)) for family in FAMILIES)
    yield "smollm2", lambda get, tmp: smollm2_folder()


@pytest.mark.parametrize("name,make", list(folders()), ids=[n for n, _ in folders()])
def test_the_second_load_is_the_snapshot_and_tokenizes_as_transformers(cache, tiny_model_dir, tmp_path, name, make):
    folder = make(tiny_model_dir, tmp_path)
    first = load_tokenizer(folder)
    assert not isinstance(first, SnapshotTokenizer)         # cold: AutoTokenizer's own, snapshotted
    assert len(list(cache.glob("*.meta.json"))) == 1
    second = load_tokenizer(folder)
    assert isinstance(second, SnapshotTokenizer)
    assert_same(second, AutoTokenizer.from_pretrained(str(folder)))


def test_a_changed_tokenizer_file_is_never_served_from_the_old_snapshot(cache, tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir("llama"), tmp_path / "model")
    load_tokenizer(folder)
    key = snapshot_key(folder)
    config = folder / "tokenizer_config.json"
    config.write_text(config.read_text().replace("<|im_end|>", "<|endoftext|>", 1))
    assert snapshot_key(folder) != key
    assert not isinstance(load_tokenizer(folder), SnapshotTokenizer)   # rebuilt from the changed folder
    assert_same(load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder)))


def test_a_damaged_snapshot_is_discarded_with_a_warning_and_rebuilt(cache, tiny_model_dir, caplog):
    folder = tiny_model_dir("llama")
    load_tokenizer(folder)
    backend = next(cache.glob("*.tokenizer.json"))
    backend.write_text(backend.read_text()[:1000])                      # cut short
    tok = load_tokenizer(folder)
    assert not isinstance(tok, SnapshotTokenizer)
    assert "unusable" in caplog.text
    assert_same(load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder)))


def test_an_unwritable_cache_still_loads_the_tokenizer(tmp_path, monkeypatch, tiny_model_dir):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(blocker))                # cache root cannot be created
    tok = load_tokenizer(tiny_model_dir("llama"))
    assert tok("Hello world").input_ids
    assert load_snapshot(tiny_model_dir("llama")) is None


def test_the_probe_catches_a_snapshot_that_renders_chats_differently(cache, tiny_model_dir):
    folder = tiny_model_dir("llama")
    load_tokenizer(folder)
    snap, theirs = load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert probe_mismatch(snap, theirs) is None
    snap.chat_template = snap.chat_template.replace("\n", " ", 1)
    assert probe_mismatch(snap, theirs) == "the chat template"
    snap.chat_template, snap.clean_up = theirs.chat_template, True     # decode with transformers' space clean-up
    assert probe_mismatch(snap, theirs) is not None


def test_the_cache_folder_is_the_configured_one(cache, tiny_model_dir):
    load_tokenizer(tiny_model_dir("llama"))
    assert os.listdir(cache)


def test_a_second_start_does_not_import_transformers(cache, tiny_model_dir):
    """Importing transformers costs about a second: a start whose tokenizer is snapshotted never pays it."""
    import subprocess
    import sys
    script = (
        "import sys\n"
        "from llmchat.engine import LLM, SamplingParams\n"
        f"llm = LLM({str(tiny_model_dir('llama'))!r}, kv_cache_gb=0.01)\n"
        "out = llm.generate([[{'role': 'user', 'content': 'hello'}]], SamplingParams(max_tokens=4, temperature=0.0))\n"
        "print(out[0].token_ids, 'transformers' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    (ids_cold, imported_cold), (ids_warm, imported_warm) = [r.stdout.strip().splitlines()[-1].rsplit(" ", 1)
                                                            for r in runs]
    assert imported_cold == "True" and imported_warm == "False"
    assert ids_warm == ids_cold

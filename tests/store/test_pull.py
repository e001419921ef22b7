"""Downloads through the real huggingface_hub client against the stand-in Hub on 127.0.0.1."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from fake_hub import GOOD_TOKEN, FakeRepo
from llmchat.engine.store import (CorruptDownloadError, DownloadCancelled, GatedRepoError, ModelStore,
                                  NotEnoughDiskError, RepoNotFoundError, UnsupportedModelError)


def test_pull_lands_in_hf_cache_and_lists(store, hub, tiny_model_dir, tmp_path):
    src = tiny_model_dir("qwen2")
    repo = hub.add(FakeRepo.from_folder("org/tiny-qwen2", src))
    repo.files["pytorch_model.bin"] = b"not needed"  # a file the engine does not need: never fetched
    repo.files["README.md"] = b"# card"
    seen = []
    model = store.pull("org/tiny-qwen2", progress=seen.append)
    snap = Path(os.environ["HF_HOME"]) / "hub" / "models--org--tiny-qwen2" / "snapshots" / repo.sha
    assert model.path == snap and model.revision == repo.sha
    assert sorted(p.name for p in snap.iterdir()) == sorted(p.name for p in src.iterdir())
    assert (snap / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert (snap.parent.parent / "refs" / "main").read_text() == repo.sha
    assert not any("pytorch_model.bin" in p or "README" in p for _m, p, _r in hub.requests)
    assert model.supported and model.architecture == "Qwen2ForCausalLM" and model.kind == "model"
    assert [m.name for m in store.list()] == ["org/tiny-qwen2"]
    assert store.resolve("org/tiny-qwen2") == snap
    # progress: bytes grow to the total and the last report is the finished one
    assert seen[-1].finished and seen[-1].done_bytes == seen[-1].total_bytes > 0
    assert all(a.done_bytes <= b.done_bytes for a, b in zip(seen, seen[1:]))
    assert {p.num_files for p in seen} == {len(list(snap.iterdir()))}
    assert any(p.bytes_per_s > 0 and p.eta_s is not None for p in seen[:-1])
    # pulling again downloads nothing
    before = len(hub.requests)
    store.pull("org/tiny-qwen2")
    assert not [r for r in hub.requests[before:] if r[0] == "GET" and "/resolve/" in r[1] and "safetensors" in r[1]]
    freed = store.remove("org/tiny-qwen2")
    assert freed >= (src / "model.safetensors").stat().st_size
    assert store.list() == [] and not snap.exists()


def test_sharded_model_and_revision(store, hub, tmp_path):
    from tiny_models import make_model
    src = make_model(tmp_path / "sharded", "mistral", max_shard_size="100KB")
    assert (src / "model.safetensors.index.json").exists()
    repo = hub.add(FakeRepo.from_folder("org/sharded", src))
    model = store.pull(f"org/sharded@{repo.sha}")
    shards = set(json.loads((src / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert len(shards) > 1 and all((model.path / s).exists() for s in shards)
    assert model.supported and model.architecture == "MistralForCausalLM"


def test_resume_after_dropped_connection(store, hub, big_llama):
    hub.add(FakeRepo.from_folder("org/big", big_llama))
    hub.drop_after["model.safetensors"] = 3_000_000
    model = store.pull("org/big")
    assert hub.ranged("model.safetensors") == ["bytes=3000000-"]  # continued, not restarted
    assert (model.path / "model.safetensors").read_bytes() == (big_llama / "model.safetensors").read_bytes()


def test_cancel_keeps_partial_unlisted_then_resumes(store, hub, big_llama):
    hub.add(FakeRepo.from_folder("org/big", big_llama))
    hub.slow = 0.002
    cancel = threading.Event()

    def on_progress(p):
        if p.filename == "model.safetensors" and p.done_bytes > 2_000_000:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="resume"):
        store.pull("org/big", progress=on_progress, cancel=cancel)
    listed = store.list()
    assert all(not m.supported for m in listed)  # never usable half-downloaded
    assert listed and "incomplete" in listed[0].reason
    with pytest.raises(Exception, match="incomplete"):
        store.resolve("org/big")
    # a new store (as after a restart) continues the partial blob with a Range request
    hub.slow = 0.0
    model = ModelStore().pull("org/big")
    ranges = hub.ranged("model.safetensors")
    assert len(ranges) == 1 and int(ranges[0][6:-1]) >= 2_000_000
    assert model.supported
    assert (model.path / "model.safetensors").read_bytes() == (big_llama / "model.safetensors").read_bytes()


def test_progress_reports_bytes_of_a_burst_while_the_connection_stalls(store, hub, big_llama):
    # the hub sends the first 64 KiB of the weights and holds the rest: what arrived within the report
    # interval of the file's start must still be reported, not wait for the next byte (or the read timeout)
    hub.add(FakeRepo.from_folder("org/big", big_llama))
    gate = hub.hold["model.safetensors"] = threading.Event()
    reported, at_start = threading.Event(), []

    def on_progress(p):
        if p.filename == "model.safetensors":
            at_start.append(p.done_bytes)   # the first report is the file's begin, before any of its bytes
            if p.done_bytes > at_start[0]:
                reported.set()

    puller = threading.Thread(target=store.pull, args=("org/big",), kwargs={"progress": on_progress})
    puller.start()
    try:
        assert reported.wait(timeout=20), "the held file's first bytes were never reported"
        assert not gate.is_set()   # reported while the body was still held
    finally:
        gate.set()
        puller.join()
    assert store.resolve("org/big")


def test_missing_repo_and_revision(store, hub, tiny_model_dir):
    with pytest.raises(RepoNotFoundError, match="not found"):
        store.pull("org/nope")
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    with pytest.raises(RepoNotFoundError, match="revision"):
        store.pull("org/tiny", revision="v9")


def test_gated_repo_needs_token_and_token_is_not_stored(store, hub, tiny_model_dir, monkeypatch, tmp_path):
    hub.add(FakeRepo.from_folder("org/gated", tiny_model_dir("llama"), gated=True))
    with pytest.raises(GatedRepoError, match="accept its license"):
        store.pull("org/gated")
    assert store.list() == []
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(GatedRepoError, match="your token has no access"):
        store.pull("org/gated")
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    assert store.pull("org/gated").supported
    for p in (tmp_path / "data").rglob("*"):
        assert not p.is_file() or GOOD_TOKEN.encode() not in p.read_bytes()


@pytest.mark.parametrize("bad", ["model.safetensors", "tokenizer.json"])  # LFS sha256 / git blob sha1
def test_corrupted_file_detected_and_not_listed(store, hub, tiny_model_dir, bad):
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    hub.corrupt.add(bad)
    with pytest.raises(CorruptDownloadError, match="checksum mismatch"):
        store.pull("org/tiny")
    assert all(not m.supported for m in store.list())
    hub.corrupt.clear()
    assert store.pull("org/tiny").supported  # the bad bytes were thrown away


def test_disk_space_refused_before_download(hub_env, hub, tiny_model_dir):
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    store = ModelStore(free_space=lambda path: 1000)
    with pytest.raises(NotEnoughDiskError, match="not enough disk space"):
        store.pull("org/tiny")
    assert not [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert store.list() == []


def test_unsupported_refused_before_download(store, hub, tiny_model_dir, tmp_path):
    import shutil
    gemma = tmp_path / "gemma"
    shutil.copytree(tiny_model_dir("llama"), gemma)
    cfg = json.loads((gemma / "config.json").read_text())
    (gemma / "config.json").write_text(json.dumps({**cfg, "architectures": ["Gemma2ForCausalLM"]}))
    hub.add(FakeRepo.from_folder("org/gemma", gemma))
    binonly = FakeRepo.from_folder("org/binonly", tiny_model_dir("llama"))
    binonly.files["pytorch_model.bin"] = binonly.files.pop("model.safetensors")
    hub.add(binonly)
    with pytest.raises(UnsupportedModelError, match="Gemma2ForCausalLM"):
        store.pull("org/gemma")
    with pytest.raises(UnsupportedModelError, match=r"\.bin"):
        store.pull("org/binonly")
    assert not [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert store.list() == []


def test_adapter_repo_pulled_as_adapter(store, hub, tmp_path):
    from safetensors.torch import save_file
    import torch
    folder = tmp_path / "lora"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
         "base_model_name_or_path": "org/tiny"}))
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 64)},
              str(folder / "adapter_model.safetensors"))
    hub.add(FakeRepo.from_folder("org/lora", folder))
    model = store.pull("org/lora")
    assert model.kind == "adapter" and model.supported and model.base_model == "org/tiny"
    assert model.num_params == 256


def test_offline_lists_and_resolves_without_network(store, hub, tiny_model_dir, monkeypatch):
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    path = store.pull("org/tiny").path
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub.requests)
    assert [m.name for m in store.list()] == ["org/tiny"]
    assert store.resolve("org/tiny") == path
    assert store.pull("org/tiny").path == path  # already complete: no network needed
    assert len(hub.requests) == before
    from llmchat.engine.store import OfflineError
    with pytest.raises(OfflineError, match="offline"):
        store.pull("org/other")
    with pytest.raises(OfflineError):
        store.search("tiny")


def test_no_route_fails_fast(store, monkeypatch):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    from llmchat.engine.store import OfflineError
    with pytest.raises(OfflineError, match="cannot reach"):
        store.search("x")
    with pytest.raises(OfflineError, match="cannot reach"):
        store.pull("org/x")


def test_hf_hub_cache_honoured(hub_env, hub, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    model = ModelStore().pull("org/tiny")
    assert (tmp_path / "elsewhere") in model.path.parents


def test_two_revisions_remove_old_keeps_shared_blobs(store, hub, tiny_model_dir):
    repo = hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    old = store.pull("org/tiny")
    repo.files["generation_config.json"] = b'{"do_sample": false, "eos_token_id": 2}'
    repo.sha = "b" * 40  # a new commit on main that changes one small file
    new = store.pull("org/tiny")
    names = sorted(m.name for m in store.list())
    assert names == ["org/tiny", f"org/tiny@{old.revision[:12]}"]
    assert store.resolve("org/tiny") == new.path
    freed = store.remove(f"org/tiny@{old.revision[:12]}")
    assert 0 < freed < 2000  # only the old generation_config blob: the weights are shared
    assert (new.path / "model.safetensors").read_bytes()
    assert [m.name for m in store.list()] == ["org/tiny"] and store.list()[0].supported


def test_pulled_model_runs_in_the_engine(store, hub, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM
    from llmchat.engine import LLM, SamplingParams
    src = tiny_model_dir("qwen3")
    hub.add(FakeRepo.from_folder("org/tiny-qwen3", src))
    store.pull("org/tiny-qwen3")
    llm = LLM(str(store.resolve("org/tiny-qwen3")), dtype="float32", kv_cache_gb=0.01)
    prompt = [5, 17, 42, 99, 7]
    out = llm.generate([prompt], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))[0]
    ref = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    expected = ref.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.token_ids == expected[0, len(prompt):].tolist()

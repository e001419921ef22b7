"""GGUF repos on the stand-in Hub: search shows their quants with sizes, `pull --quant` downloads exactly one
file (resumable, verified) and registers it through the store's GGUF import; bad choices are clear errors."""
from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from fake_hub import FakeRepo
from gguf_repo import gguf_repo, tiny_gguf
from llmchat.engine.store import DownloadCancelled, ModelStore, UnsupportedModelError
from llmchat.engine.store.pull import QuantChoiceError, pull_gguf
from test_cli_models import cli

REPO = "bartowski/Tiny-Chat-GGUF"
Q8 = "Tiny-Chat-Q8_0.gguf"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("tiny-gguf"))


@pytest.fixture
def repo(hub, gguf):
    return hub.add(gguf_repo(REPO, gguf, downloads=40))


def file_gets(hub) -> list[str]:
    return [p.rsplit("/", 1)[-1] for m, p, _r in hub.requests if m == "GET" and "/resolve/" in p]


def test_search_lists_quants_with_sizes(store, hub, repo, gguf, tiny_model_dir):
    hub.add(FakeRepo.from_folder("org/tiny-chat", tiny_model_dir("llama"), downloads=10))
    hub.add(gguf_repo("other/Tiny-Gemma-GGUF", gguf, architecture="gemma2", downloads=99))
    only_iq = gguf_repo("other/Tiny-IQ-GGUF", gguf, downloads=98)
    only_iq.files = {k: v for k, v in only_iq.files.items() if "IQ4_XS" in k}
    hub.add(only_iq)
    found = store.search("tiny")
    assert [m.repo_id for m in found] == [REPO, "org/tiny-chat"]
    hit, plain = found
    assert hit.supported and hit.architecture == "LlamaForCausalLM" and hit.num_params == 100_000
    assert plain.quants == []  # a safetensors repo stays as it was
    by_name = {q.name: q for q in hit.quants}
    assert set(by_name) == {"Q8_0", "Q4_K_M", "IQ4_XS", "Q6_K"}  # README is no quant; split parts count once
    assert by_name["Q8_0"].size == len(repo.files[Q8]) and by_name["Q8_0"].files == [Q8]
    assert by_name["Q6_K"].split and by_name["Q6_K"].size == sum(
        len(d) for n, d in repo.files.items() if "Q6_K" in n)
    assert by_name["Q4_K_M"].supported and not by_name["IQ4_XS"].supported
    assert "IQ4_XS" in by_name["IQ4_XS"].reason
    everything = {m.repo_id: m for m in store.search("tiny", include_unsupported=True)}
    assert "gemma2" in everything["other/Tiny-Gemma-GGUF"].reason
    assert not everything["other/Tiny-IQ-GGUF"].supported
    assert "no GGUF file of a type the engine runs" in everything["other/Tiny-IQ-GGUF"].reason


def test_architecture_from_tags_when_the_hub_has_no_gguf_metadata(store, hub, gguf):
    hub.add(gguf_repo("org/Tiny-Qwen-GGUF", gguf, architecture=None, tags=["gguf", "qwen2"]))
    hub.add(gguf_repo("org/Tiny-Unknown-GGUF", gguf, architecture=None))
    found = {m.repo_id: m for m in store.search("tiny", include_unsupported=True)}
    assert found["org/Tiny-Qwen-GGUF"].supported and found["org/Tiny-Qwen-GGUF"].architecture == "Qwen2ForCausalLM"
    assert not found["org/Tiny-Unknown-GGUF"].supported
    assert "architecture" in found["org/Tiny-Unknown-GGUF"].reason


def test_pull_quant_downloads_exactly_that_file_and_registers_it(store, hub, repo, gguf, monkeypatch):
    seen = []
    model = pull_gguf(store, REPO, "q8_0", progress=seen.append)  # quant names are case-insensitive
    assert file_gets(hub) == [Q8]  # no other quant, no README, no tokenizer files
    assert model.source == "gguf" and model.supported and model.architecture == "LlamaForCausalLM"
    assert model.name == "Tiny-Chat-Q8_0"  # the file's name, not the hash the HF cache keeps the blob under
    assert model.quant in (None, "Q8_0")  # None while the store's GGUF import still writes a dequantized copy
    snap = store.cache_dir / "models--bartowski--Tiny-Chat-GGUF" / "snapshots" / repo.sha
    assert (snap / Q8).read_bytes() == gguf.read_bytes() and os.listdir(snap) == [Q8]
    downloads = [p for p in seen if p.repo_id == REPO]
    assert downloads[-1].finished and downloads[-1].done_bytes == downloads[-1].total_bytes == len(repo.files[Q8])
    assert model.name in {m.name for m in store.list()} and store.resolve(model.name)
    # pulling again downloads nothing, and works offline from the cache
    assert pull_gguf(store, REPO, "Q8_0").name == model.name and file_gets(hub) == [Q8]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub.requests)
    assert pull_gguf(store, REPO, Q8).name == model.name and len(hub.requests) == before  # a file name works too


def test_pull_quant_resumes_after_a_dropped_connection(store, hub, repo, gguf):
    half = len(repo.files[Q8]) // 2
    hub.drop_after[Q8] = half
    model = pull_gguf(store, REPO, "Q8_0")
    assert hub.ranged(Q8) == [f"bytes={half}-"]  # continued, not restarted
    assert model.supported
    assert (store.cache_dir / "models--bartowski--Tiny-Chat-GGUF" / "snapshots" / repo.sha / Q8).read_bytes() \
        == gguf.read_bytes()


def test_pull_quant_cancel_then_resume(store, hub, repo, gguf):
    hub.slow = 0.2  # per 64 KiB piece: the ~210 KB file takes 4 pieces, progress is reported after the first
    cancel = threading.Event()

    def on_progress(p):
        if p.done_bytes > 0:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="resume"):
        pull_gguf(store, REPO, "Q8_0", progress=on_progress, cancel=cancel)
    assert all(not m.supported for m in store.list())  # nothing usable, nothing registered
    hub.slow = 0.0
    model = pull_gguf(ModelStore(), REPO, "Q8_0")
    ranges = hub.ranged(Q8)
    assert len(ranges) == 1 and int(ranges[0][6:-1]) > 0 and model.supported


def test_corrupted_quant_file_is_refused_and_removed(store, hub, repo):
    hub.corrupt.add(Q8)
    from llmchat.engine.store import CorruptDownloadError
    with pytest.raises(CorruptDownloadError, match="checksum mismatch"):
        pull_gguf(store, REPO, "Q8_0")
    assert not any(m.supported for m in store.list())
    hub.corrupt.clear()
    assert pull_gguf(store, REPO, "Q8_0").supported


def test_bad_quant_choices_are_refused_before_any_download(store, hub, repo, tiny_model_dir):
    with pytest.raises(QuantChoiceError, match=r"GGUF repo: pick a quant .*--quant.*Q8_0"):
        store.pull(REPO)
    with pytest.raises(QuantChoiceError, match=r"has no Q5_K_M file; it has: .*Q4_K_M .*Q8_0 .*not runnable: IQ4_XS"):
        pull_gguf(store, REPO, "Q5_K_M")
    with pytest.raises(UnsupportedModelError, match="IQ4_XS uses tensor types the engine does not run"):
        pull_gguf(store, REPO, "IQ4_XS")
    with pytest.raises(UnsupportedModelError, match="split into 2 files.*not supported yet"):
        pull_gguf(store, REPO, "Q6_K")
    hub.add(FakeRepo.from_folder("org/tiny-chat", tiny_model_dir("llama")))
    with pytest.raises(QuantChoiceError, match="has no GGUF files: pull it without --quant"):
        pull_gguf(store, "org/tiny-chat", "Q4_K_M")
    assert file_gets(hub) == [] and store.list() == []


def test_gated_repo_and_disk_space_as_for_any_pull(hub_env, hub, gguf, monkeypatch):
    from fake_hub import GOOD_TOKEN
    from llmchat.engine.store import GatedRepoError, NotEnoughDiskError
    hub.add(gguf_repo("org/Gated-GGUF", gguf, gated=True))
    with pytest.raises(GatedRepoError, match="accept its license"):
        pull_gguf(ModelStore(), "org/Gated-GGUF", "Q8_0")
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    with pytest.raises(NotEnoughDiskError, match="not enough disk space"):
        pull_gguf(ModelStore(free_space=lambda path: 1000), "org/Gated-GGUF", "Q8_0")
    assert file_gets(hub) == []
    assert pull_gguf(ModelStore(), "org/Gated-GGUF", "Q8_0").supported


def test_unsupported_base_model_refused_before_download(store, hub, gguf, tiny_model_dir, tmp_path):
    gemma = tmp_path / "gemma"
    shutil.copytree(tiny_model_dir("llama"), gemma)
    cfg = json.loads((gemma / "config.json").read_text())
    (gemma / "config.json").write_text(json.dumps({**cfg, "architectures": ["Gemma2ForCausalLM"]}))
    hub.add(FakeRepo.from_folder("org/gemma", gemma))
    hub.add(gguf_repo("org/Gemma-GGUF", gguf, architecture=None,
                      tags=["gguf", "base_model:org/gemma", "base_model:quantized:org/gemma"]))
    with pytest.raises(UnsupportedModelError, match="Gemma2ForCausalLM"):
        pull_gguf(store, "org/Gemma-GGUF", "Q8_0")
    assert file_gets(hub) == []


def test_cli_search_and_pull(hub_env, hub, repo, gguf):
    human = cli("search", "tiny").stdout
    assert REPO in human and "LlamaForCausalLM" in human
    sizes = {n: f"{len(d) / 1000:.1f} KB" for n, d in repo.files.items()}
    assert f"Q8_0 {sizes[Q8]}" in human and f"Q4_K_M {sizes['Tiny-Chat-Q4_K_M.gguf']}" in human
    assert "not runnable: IQ4_XS" in human and "--quant" in human
    found = json.loads(cli("search", "tiny", "--json").stdout)["results"]
    assert {q["name"]: q["size"] for q in found[0]["quants"]}["Q8_0"] == len(repo.files[Q8])
    for args, says in [((), "pick a quant"), (("--quant", "Q5_K_M"), "has no Q5_K_M file"),
                       (("--quant", "IQ4_XS"), "does not run")]:
        proc = cli("pull", REPO, *args, ok=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and says in proc.stderr and "Q8_0" in proc.stderr
    pulled = json.loads(cli("pull", REPO, "--quant", "Q8_0", "--json").stdout)
    assert pulled["source"] == "gguf" and pulled["supported"]
    assert pulled["name"] in cli("list").stdout


def test_pulled_quant_loads_and_generates(store, hub, repo):
    """End to end from the Hub to tokens; how exactly quantized weights compute is the engine's tests' job."""
    from llmchat.engine import LLM, SamplingParams
    model = pull_gguf(store, REPO, "Q8_0")
    llm = LLM(str(store.resolve(model.name)), dtype="float32", kv_cache_gb=0.01)
    out = llm.generate([[5, 17, 42, 99, 7]], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))[0]
    assert len(out.token_ids) == 6 and all(0 <= t < 384 for t in out.token_ids)

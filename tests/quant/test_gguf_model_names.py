"""One way to name a model: a .gguf path works everywhere a model name does. The store's resolve_model is the
one rule (a folder -> itself; a .gguf file -> registered in place -> its library folder; a library name -> its
folder), and LLM, AsyncEngine, `llmchat run`, serve, compare and bench all go through it."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from llmchat.engine import LLM, AsyncEngine, SamplingParams
from llmchat.engine.compare.runner import default_resolver
from llmchat.engine.store import ModelStore, default_data_dir, resolve_model
from llmchat.tui.cli import bench as cli_bench
from llmchat.tui.cli import run as cli_run
from llmchat.tui.cli.serve import build_specs
from llmchat.tui.paths import data_dir

GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
PROMPT = [5, 17, 42, 99, 120, 7, 8, 9]


@pytest.fixture
def library(tmp_path, monkeypatch) -> Path:
    """An empty library of the user's own (LLMCHAT_DATA_DIR), as the front ends find it."""
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "data"


def test_the_one_rule(library, tiny_gguf, tiny_source):
    gguf = tiny_gguf("llama", "q8_0")
    folder = resolve_model(gguf)
    assert folder.is_dir() and library in folder.parents           # registered in place, in the user's library
    assert resolve_model(str(gguf)) == folder                       # once: the second time finds the entry
    assert len(ModelStore().list()) == 1
    assert resolve_model(gguf.stem) == folder                       # now also by its library name
    assert resolve_model(tiny_source("llama")) == tiny_source("llama").resolve()   # a folder is itself
    with pytest.raises(FileNotFoundError, match="no model named 'nothing-here'"):
        resolve_model("nothing-here")
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        resolve_model(gguf.with_name("missing.gguf"))


def test_data_dir_is_read_in_one_place_with_home_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LLMCHAT_DATA_DIR", "~/llmchat-data")
    assert default_data_dir() == tmp_path / "llmchat-data"
    assert data_dir() == tmp_path / "llmchat-data" and data_dir().is_dir()    # the app's chats and library
    assert ModelStore().data_dir == tmp_path / "llmchat-data"


def test_llm_takes_a_gguf_path_and_gives_the_registered_folders_tokens(library, tiny_gguf):
    gguf = tiny_gguf("llama", "q8_0")
    from_file = LLM(str(gguf), dtype="float32", kv_cache_gb=0.02)
    folder = resolve_model(gguf)
    assert from_file.config.model_path == folder
    from_folder = LLM(folder, dtype="float32", kv_cache_gb=0.02)
    assert from_file.generate([PROMPT], GREEDY)[0].token_ids == from_folder.generate([PROMPT], GREEDY)[0].token_ids
    by_name = LLM(gguf.stem, dtype="float32", kv_cache_gb=0.02)    # and by its library name
    assert by_name.generate([PROMPT], GREEDY)[0].token_ids == from_folder.generate([PROMPT], GREEDY)[0].token_ids


def test_llm_names_a_missing_model_clearly(library):
    with pytest.raises(FileNotFoundError, match="no model named 'no/such-model'"):
        LLM("no/such-model")


async def test_async_engine_takes_a_gguf_path(library, tiny_gguf):
    gguf = tiny_gguf("llama", "q8_0")
    engine = await asyncio.to_thread(AsyncEngine, gguf, dtype="float32", kv_cache_gb=0.02)
    try:
        streamed = [t async for delta in engine.generate(PROMPT, GREEDY) for t in delta.token_ids]
    finally:
        await engine.shutdown()
    expected = LLM(resolve_model(gguf), dtype="float32", kv_cache_gb=0.02).generate([PROMPT], GREEDY)[0]
    assert streamed == expected.token_ids


def test_serve_compare_and_bench_resolve_through_the_store(library, tiny_gguf):
    gguf = tiny_gguf("llama", "q8_0")
    folder = resolve_model(gguf)
    specs = build_specs(Namespace(models=[str(gguf)], adapter=[]))
    assert [(s.id, s.path) for s in specs] == [(gguf.stem, folder)]
    assert default_resolver(str(gguf)) == folder
    assert cli_run.resolve_model is resolve_model and cli_bench.resolve_model is resolve_model   # run, bench


def test_llmchat_run_on_a_gguf_file_without_max_tokens(library, tiny_gguf):
    """As a user runs it: no --max-tokens, so the reply runs until the model stops or the context is full."""
    gguf = tiny_gguf("llama", "q8_0")
    proc = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "run", str(gguf), "Hello", "--raw",
                           "--temperature", "0", "-v"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(stop)" in proc.stderr or "(length)" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout.strip()

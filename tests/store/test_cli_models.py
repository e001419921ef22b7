"""`llmchat models ...` end to end in a subprocess, against the stand-in Hub, with --json."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fake_hub import FakeRepo


def cli(*args, env=None, ok=True):
    proc = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "models", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_search_pull_list_rm(hub_env, hub, tiny_model_dir):
    hub.add(FakeRepo.from_folder("org/tiny-llama", tiny_model_dir("llama"), downloads=5))
    hub.add(FakeRepo.from_folder("org/tiny-qwen3", tiny_model_dir("qwen3"), downloads=9))
    binonly = hub.add(FakeRepo.from_folder("org/tiny-bin", tiny_model_dir("llama"), downloads=99))
    binonly.files["pytorch_model.bin"] = binonly.files.pop("model.safetensors")
    found = json.loads(cli("search", "tiny", "--json").stdout)
    assert [m["repo_id"] for m in found["results"]] == ["org/tiny-qwen3", "org/tiny-llama"]
    assert found["hidden"][0]["repo_id"] == "org/tiny-bin" and ".bin" in found["hidden"][0]["reason"]
    assert found["results"][0]["num_params"] > 0
    human = cli("search", "tiny").stdout
    assert "org/tiny-qwen3" in human and "Qwen3ForCausalLM" in human and "1 more result(s) hidden" in human
    pulled = json.loads(cli("pull", "org/tiny-llama", "--json").stdout)
    assert pulled["supported"] and pulled["architecture"] == "LlamaForCausalLM"
    assert pulled["path"].startswith(os.environ["HF_HOME"])
    listed = json.loads(cli("list", "--json").stdout)
    assert [m["name"] for m in listed] == ["org/tiny-llama"]
    assert "org/tiny-llama" in cli("list").stdout
    removed = json.loads(cli("rm", "org/tiny-llama", "--json").stdout)
    assert pulled["size_bytes"] <= removed["freed_bytes"] < pulled["size_bytes"] + 4096  # + refs/main
    assert json.loads(cli("list", "--json").stdout) == []


def test_errors_are_messages_not_tracebacks(hub_env, hub):
    proc = cli("pull", "org/missing", ok=False)
    assert proc.returncode == 2 and "llmchat: error:" in proc.stderr and "not found" in proc.stderr
    proc = cli("rm", "nothing", ok=False)
    assert proc.returncode == 2 and "no model named" in proc.stderr
    proc = cli("search", "x", "--sort", "stars", ok=False)
    assert proc.returncode == 2  # argparse refuses the choice


def test_import_folder_and_offline_list(hub_env, tiny_model_dir):
    folder = tiny_model_dir("mistral")
    model = json.loads(cli("import", str(folder), "--name", "mine", "--json").stdout)
    assert model["name"] == "mine" and model["source"] == "folder" and model["path"] == str(folder.resolve())
    proc = cli("list", "--json", env={"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://10.255.255.1:9"})
    assert [m["name"] for m in json.loads(proc.stdout)] == ["mine"]
    proc = cli("search", "x", env={"HF_HUB_OFFLINE": "1"}, ok=False)
    assert "offline" in proc.stderr
    assert "unregistered" in cli("rm", "mine").stdout and folder.exists()


def test_disk_space_refusal_via_env(hub_env, hub, tiny_model_dir):
    hub.add(FakeRepo.from_folder("org/tiny", tiny_model_dir("llama")))
    proc = cli("pull", "org/tiny", env={"LLMCHAT_FREE_SPACE_BYTES": "10"}, ok=False)
    assert proc.returncode == 2 and "not enough disk space" in proc.stderr

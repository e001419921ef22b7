"""`llmchat compare` mixing a local model and the same model on a remote `llmchat serve`; `models list --remote`."""
from __future__ import annotations

import json

import pytest

from llmchat.tui.cli import main


@pytest.fixture
def config(tmp_path, monkeypatch):
    for name in ("LLMCHAT_DATA_DIR", "LLMCHAT_CONFIG_DIR", "HF_HUB_CACHE"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(name, str(tmp_path / name))
    return tmp_path / "LLMCHAT_CONFIG_DIR"


def run_compare(tmp_path, models, endpoints):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Capital of France?", "expected": "Paris"}\n'
                       '{"system": "Be terse.", "prompt": "Two plus two?"}\n')
    out = tmp_path / "out"
    argv = ["compare", "--models", *models, "--prompts", str(prompts), "--out", str(out), "--max-tokens", "8",
            "--kv-cache-gb", "0.05"]
    for e in endpoints:
        argv += ["--endpoint", e]
    status = main(argv)
    return status, json.loads((out / "report.json").read_text())


def test_compare_local_and_remote_side_by_side(tmp_path, config, remote_model, server, closed_port_url):
    remote = "remote:lab/tiny"
    status, report = run_compare(tmp_path, [str(remote_model), remote, "remote:gone/tiny"],
                                 [f"lab={server.base_url}", f"gone={closed_port_url}"])
    ids = [m["id"] for m in report["models"]]
    assert ids == [remote_model.name, remote, "remote:gone/tiny"]
    for row in report["results"]:
        local, far = row[remote_model.name], row[remote]
        assert far["error"] is None and far["text"] == local["text"]   # greedy, same weights: same reply
        assert far["generated_tokens"] == local["generated_tokens"] and far["prompt_tokens"] == local["prompt_tokens"]
        assert row["remote:gone/tiny"]["error"].startswith("cannot reach gone")
    assert status == 1 and all(e["model"] == "remote:gone/tiny" for e in report["errors"])


def test_compare_refuses_an_unknown_endpoint_up_front(tmp_path, config, remote_model):
    status, report = run_compare(tmp_path, [str(remote_model), "remote:nowhere/x"], [])
    assert status == 1
    (error,) = report["errors"]
    assert error["model"] == "remote:nowhere/x" and "no endpoint named 'nowhere'" in error["message"]
    assert all(row[remote_model.name]["error"] is None for row in report["results"])


def test_models_list_remote_from_settings_and_flag(config, server, closed_port_url, capsys):
    (config / "settings.toml").write_text(f'[[endpoints]]\nname = "lab"\nbase_url = "{server.base_url}"\n')
    assert main(["models", "list", "--remote", "--endpoint", f"gone={closed_port_url}", "--json"]) == 0
    out = capsys.readouterr()
    rows = [r for r in json.loads(out.out) if r.get("kind") == "remote"]
    assert rows == [{"name": "remote:lab/tiny", "kind": "remote", "endpoint": "lab",
                     "base_url": server.base_url + "/v1", "id": "tiny"}]
    assert "cannot reach gone" in out.err
    assert main(["models", "list", "--remote"]) == 0
    assert "remote:lab/tiny" in capsys.readouterr().out


def test_bad_endpoint_arguments_are_refused(config, capsys):
    assert main(["models", "list", "--remote", "--endpoint", "lab"]) == 2
    assert "--endpoint takes NAME=URL" in capsys.readouterr().err
    assert main(["models", "list", "--remote", "--endpoint", "lab=ftp://x"]) == 2
    assert "endpoint URL must look like http://host:port/v1" in capsys.readouterr().err
    (config / "settings.toml").write_text('[[endpoints]]\nname = "lab"\nbase_url = "http://h:1"\napi_key = "k"\n')
    assert main(["models", "list", "--remote"]) == 2
    assert "unknown key(s): api_key" in capsys.readouterr().err

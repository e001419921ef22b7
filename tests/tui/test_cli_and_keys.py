"""`llmchat --model` checks and GGUF import, and the keyboard contract: every action in the palette,
every binding with an id."""
from __future__ import annotations

import sys
from pathlib import Path

from textual.binding import Binding

from llmchat.tui.app import LlmChatApp
from llmchat.tui.app.main import prepare_model
from llmchat.tui.cli import main as cli_main
from llmchat.tui.app.commands import ACTIONS
from llmchat.tui.app.screens.main_screen import MainScreen
from llmchat.tui.app.code_blocks import code_blocks
from llmchat.tui.app.widgets.message_view import MessageView

sys.path.insert(0, str(Path(__file__).parent.parent / "store"))
from gguf_writer import write_llama_gguf  # noqa: E402


def test_the_cli_makes_openmp_threads_wait_passively_unless_told_otherwise(dirs, monkeypatch):
    import subprocess

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    # in a fresh process, as the entry point runs it: set before torch loads
    code = ("import os, llmchat.tui.cli as cli; cli.tune_process(); import torch; "
            "print(os.environ['OMP_WAIT_POLICY'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "ACTIVE"


def test_missing_model_is_a_clear_error_not_a_traceback(dirs, capsys):
    assert cli_main(["--model", str(dirs["data"] / "no-such-model")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmchat: error:") and "no-such-model" in err and "Traceback" not in err


def test_model_flag_accepts_a_folder_and_imports_a_gguf_file(dirs, chat_model, tmp_path):
    assert prepare_model(str(chat_model)) == str(chat_model.resolve())
    gguf = write_llama_gguf(chat_model, tmp_path / "tiny-chat.gguf")
    name = prepare_model(str(gguf))
    from llmchat.engine.store import ModelStore
    resolved = ModelStore().resolve(name)
    assert (Path(resolved) / "config.json").exists()


def test_every_palette_action_exists_and_every_binding_has_an_id():
    for title, _, action in ACTIONS:
        assert hasattr(LlmChatApp, f"action_{action}") or hasattr(MainScreen, f"action_{action}"), title
    keys = LlmChatApp.BINDINGS + MainScreen.BINDINGS
    bindings = [b for b in keys + MessageView.BINDINGS if isinstance(b, Binding)]
    assert all(b.id for b in bindings)
    assert len({b.id for b in bindings}) == len(bindings)
    # every footer action of the app and the chat screen can also be found in the palette
    palette = {action for _, _, action in ACTIONS}
    assert {b.action for b in keys} <= palette


def test_code_blocks_are_found_even_when_a_reply_is_cut_off():
    text = "Here:\n```python\nprint(1)\n```\nand\n```\nunfinished"
    assert code_blocks(text) == ["print(1)", "unfinished"]

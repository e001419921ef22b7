"""Drive the real `llmchat` binary in a tmux terminal: start it, send keys, wait for what the screen shows."""
from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import tomli_w

TIMEOUT = 120.0


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], check=True, capture_output=True, text=True).stdout


def wait_for_screen(socket: str, predicate, what: str, timeout: float = TIMEOUT) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = tmux(socket, "capture-pane", "-p", "-t", "smoke")
        if predicate(screen):
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
        time.sleep(0.2)   # polling a real terminal from outside: there is no event to wait on


def app_env(tmp_path, settings: dict | None = None) -> dict:
    """Data, config and HF cache under tmp_path (settings.toml written), as environment variables."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "settings.toml").write_text(tomli_w.dumps({"kv_cache_gb": 0.03, **(settings or {})}))
    return {"LLMCHAT_DATA_DIR": str(tmp_path / "data"), "LLMCHAT_CONFIG_DIR": str(config),
            "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}


def start_app(env: dict, args: str) -> str:
    """`llmchat ARGS` in a new tmux server (140x40); returns its socket name (kill it with stop_tmux)."""
    assert shutil.which("tmux"), "tmux is required (apt-get install tmux)"
    llmchat = shutil.which("llmchat")
    assert llmchat, "the llmchat entry point is not installed (pip install -e .)"
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    socket = f"llmchat-smoke-{uuid.uuid4().hex[:8]}"
    tmux(socket, "new-session", "-d", "-s", "smoke", "-x", "140", "-y", "40",
         f"env {exports} {llmchat} {args}; sleep 30")
    return socket


def app_pid(socket: str) -> int:
    """The llmchat process under the tmux pane's shell."""
    shell = int(tmux(socket, "display-message", "-p", "-t", "smoke", "#{pane_pid}").strip())
    children = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()
    for pid in children:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        if any(b"llmchat" in part for part in cmdline):
            return int(pid)
    raise AssertionError(f"no llmchat process under the pane (children: {children})")


def stop_tmux(socket: str) -> None:
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)

"""The KV disk tier from the command line: a second `llmchat run` (a new process) reads the first one's chat
from disk and prints the same reply; `--kv-disk off` neither reads nor writes; `llmchat cache` shows each
model's entries, size and hit rate, and `clear` empties one model's or all."""
from __future__ import annotations

import os
import re
import subprocess
import sys

LONG = "Tell me about " + " ".join(f"item {i}" for i in range(60))


def llmchat(cache_dir, *args):
    env = {**os.environ, "LLMCHAT_CACHE_DIR": str(cache_dir)}
    env.pop("LLMCHAT_KV_DISK", None)          # the default, as a user has it: on
    return subprocess.run([sys.executable, "-m", "llmchat.tui.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=600, env=env)


def from_disk(stderr: str) -> int:
    found = re.search(r"\((\d+) read from disk\)", stderr)
    return int(found.group(1)) if found else 0


def test_a_second_run_reads_the_first_ones_blocks(tiny_model_dir, tmp_path):
    folder, other = tiny_model_dir("qwen2"), tiny_model_dir("llama")
    cache = tmp_path / "cache"
    run = ("run", folder, LONG, "--max-tokens", "8", "--temperature", "0", "-v")
    first = llmchat(cache, *run)
    assert first.returncode == 0, first.stderr
    assert from_disk(first.stderr) == 0
    second = llmchat(cache, *run)
    assert second.returncode == 0, second.stderr
    prompt = int(re.search(r"prompt (\d+) tokens", second.stderr).group(1))
    assert from_disk(second.stderr) == (prompt - 1) // 16 * 16 > 0
    assert second.stdout == first.stdout
    off = llmchat(tmp_path / "off", *run, "--kv-disk", "off")
    assert off.stdout == first.stdout and from_disk(off.stderr) == 0
    assert not (tmp_path / "off" / "kv").exists()

    assert llmchat(cache, "run", other, LONG, "--max-tokens", "2").returncode == 0
    shown = llmchat(cache, "cache")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[-1]: line.split() for line in shown.stdout.splitlines()[1:-1]}
    assert set(rows) == {str(folder.resolve()), str(other.resolve())}
    assert rows[str(folder.resolve())][3] == "50%" and rows[str(other.resolve())][3] == "0%"   # hit rates (size is 2 words)
    cleared = llmchat(cache, "cache", "clear", folder)
    assert cleared.returncode == 0 and "cleared" in cleared.stdout
    assert str(folder.resolve()) not in llmchat(cache, "cache").stdout
    assert llmchat(cache, "cache", "clear").returncode == 0
    assert "no KV blocks on disk" in llmchat(cache, "cache").stdout

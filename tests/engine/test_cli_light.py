"""The command line's light paths load no torch (~2 s): `llmchat --help` with every subcommand's options, and
`llmchat cache`, which lists and clears KV folders on disk."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

LOADED_TORCH = """
import sys
from llmchat.tui.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("torch loaded" if "torch" in sys.modules else "no torch", code)
"""


@pytest.mark.parametrize("argv", [["--help"], ["cache"], ["cache", "clear", "no-such-model"]])
def test_help_and_cache_do_not_load_torch(argv, tmp_path):
    env = {"LLMCHAT_CACHE_DIR": str(tmp_path / "cache"), "LLMCHAT_DATA_DIR": str(tmp_path / "data"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", LOADED_TORCH, *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1].startswith("no torch"), done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_bench_turns_the_kv_disk_tier_off_unless_asked(monkeypatch):
    """A prompt read back from an earlier run's blocks would pass for prefill speed: bench's default is off,
    through the same option (and the same LLMCHAT_KV_DISK) as the other commands, whose default is the engine's."""
    from llmchat.tui.cli import build_parser
    from llmchat.tui.cli.kv_disk_option import apply_kv_disk
    for argv, want in ((["bench", "m"], "0"), (["bench", "m", "--kv-disk", "on"], "1"), (["run", "m", "hi"], None)):
        monkeypatch.delenv("LLMCHAT_KV_DISK", raising=False)
        apply_kv_disk(build_parser(argv).parse_args(argv))
        assert os.environ.get("LLMCHAT_KV_DISK") == want, argv

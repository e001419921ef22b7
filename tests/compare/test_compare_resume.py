"""A compare run killed part-way continues with --resume and ends with the same report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from run_args import compare_argv
from llmchat.tui.cli import main
from report_checks import assert_report_files_agree, report_differences, without_timings



def complete_lines(path) -> int:
    if not path.exists():
        return 0
    return path.read_bytes().count(b"\n")


def test_kill_then_resume_gives_the_same_report(compare_models, compare_adapter, prompt_file, straight_run,
                                                tmp_path):
    argv = compare_argv(compare_models, compare_adapter, prompt_file)
    total = 3 * 5                                  # llama, llama+adapter, qwen x 5 prompts

    killed = tmp_path / "killed"
    results = killed / "results.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "llmchat.tui.cli", *argv, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        while complete_lines(results) == 0 and proc.poll() is None:
            pass                                   # busy-poll: kill as soon as the first model is saved
        proc.send_signal(signal.SIGKILL)
    finally:
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    written = complete_lines(results)
    assert 0 < written < total, f"kill landed after {written}/{total} results; the test needs a partial run"
    partial = json.loads((killed / "report.json").read_text())
    assert partial["run"]["complete"] is False

    # Without --resume the folder is refused rather than overwritten.
    assert main([*argv, "--out", str(killed)]) == 2
    assert main([*argv, "--out", str(killed), "--resume"]) == 0
    assert complete_lines(results) == total        # finished work was not redone
    resumed = assert_report_files_agree(killed)

    expected = without_timings(assert_report_files_agree(straight_run))
    assert without_timings(resumed) == expected, report_differences(without_timings(resumed), expected)
    # A second --resume has nothing left to do and rewrites the same report.
    assert main([*argv, "--out", str(killed), "--resume"]) == 0
    assert complete_lines(results) == total

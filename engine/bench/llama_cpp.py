"""`llmchat bench FILE.gguf --llama-bench PATH`: llama.cpp's own `llama-bench` on the same GGUF file in the same
run, as the anchor every speed claim is a ratio against (docs/performance.md, "Measuring against llama.cpp").

It runs `llama-bench -m FILE -t THREADS -p PREFIX -n TOKENS -o json` in its own process (with OpenMP's default
wait policy, like the other baselines: bench/common.py baseline_env) after llmchat's figures, once the engine is
gone, and reads its JSON: one object per test, the prompt test (n_prompt > 0, n_gen 0) giving the prefill rate and
the generation test (n_gen > 0, n_prompt 0) the decode rate, each as avg_ts (tokens/s, the mean over its
repetitions) with stddev_ts. Failures are messages (LlamaBenchError, a RuntimeError: `llmchat` prints it without
a traceback), never a crash of the run that measured llmchat.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

TIMEOUT_S = 3600


class LlamaBenchError(RuntimeError):
    pass


def check_binary(binary) -> Path:
    """The llama-bench executable, or a LlamaBenchError saying what is wrong with the path."""
    path = Path(binary).expanduser()
    if not path.exists():
        raise LlamaBenchError(f"--llama-bench: {path} does not exist (build llama.cpp's llama-bench: "
                              "docs/performance.md, 'Measuring against llama.cpp')")
    if path.is_dir():
        raise LlamaBenchError(f"--llama-bench: {path} is a folder; give the llama-bench binary inside it")
    if not os.access(path, os.X_OK):
        raise LlamaBenchError(f"--llama-bench: {path} is not executable")
    return path


def check_gguf(model: str, gguf: Path | None, option: str = "--llama-bench",
               error: type[Exception] = LlamaBenchError) -> Path:
    """The model's GGUF file: llama.cpp's tools read GGUF files only. option: the flag that named the tool."""
    if gguf is None:
        raise error(f"{option} needs a GGUF model (llama.cpp reads GGUF files only); {model} is a "
                    "safetensors model: give its .gguf file or a model imported from one")
    return gguf


def command(binary: Path, gguf: Path, threads: int, prefix_len: int, new_tokens: int) -> list[str]:
    return [str(binary), "-m", str(gguf), "-t", str(threads), "-p", str(prefix_len), "-n", str(new_tokens),
            "-o", "json"]


def parse(stdout: str) -> dict:
    """llama-bench's JSON (-o json: a list of test objects) -> prefill and decode tokens/s and what ran."""
    try:
        tests = json.loads(stdout)
    except json.JSONDecodeError as exc:
        first = stdout.strip().splitlines()[:1] or ["no output"]
        raise LlamaBenchError(f"llama-bench's output is not JSON ({exc.msg}; it began: {first[0][:120]!r})") from None
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise LlamaBenchError("llama-bench's JSON is not a list of tests")
    fig: dict = {}
    try:
        for t in tests:
            n_prompt, n_gen = int(t["n_prompt"]), int(t["n_gen"])
            kind = "pp" if n_prompt > 0 and n_gen == 0 else "tg" if n_gen > 0 and n_prompt == 0 else None
            if kind is None or kind in fig:
                continue
            fig[kind] = {"tokens": n_prompt or n_gen, "avg_ts": float(t["avg_ts"]),
                         "stddev_ts": float(t.get("stddev_ts", 0.0)), "repetitions": len(t.get("samples_ts", []))}
            for key in ("build_commit", "build_number", "cpu_info", "model_type", "model_size", "n_threads"):
                if key in t:
                    fig.setdefault(key, t[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise LlamaBenchError(f"llama-bench's JSON lacks a field or value it should have: {exc}") from None
    if "pp" not in fig or "tg" not in fig:
        missing = " and ".join(k for k in ("pp", "tg") if k not in fig)
        raise LlamaBenchError(f"llama-bench's JSON has no {missing} test")
    fig["prefill_tok_s"], fig["decode_tok_s_1"] = fig["pp"]["avg_ts"], fig["tg"]["avg_ts"]
    return fig


def exit_reason(returncode: int) -> str:
    """How a llama.cpp tool ended: its exit code, or the signal that killed it, with what a crash means where
    it is known (llama.cpp 2026-10 built with GGML_NATIVE on a CPU with AMX crashes on any multi-token prompt, in
    its AMX buffer type)."""
    if returncode >= 0:
        return f"failed (exit code {returncode})"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    said = f"crashed ({name})"
    if name == "SIGSEGV" and "amx_int8" in host_cpu_flags():
        said += " - llama.cpp built with GGML_NATIVE crashes so on CPUs with AMX: build it with its AMX options off"
    return said


def host_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def run(binary: Path, gguf: Path, threads: int, prefix_len: int, new_tokens: int, env: dict | None = None) -> dict:
    """Run llama-bench and parse it; a LlamaBenchError with its last stderr line if it fails."""
    cmd = command(binary, gguf, threads, prefix_len, new_tokens)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except OSError as exc:   # e.g. a file with the execute bit that is no program for this machine
        raise LlamaBenchError(f"llama-bench could not start: {exc}") from None
    except subprocess.TimeoutExpired:
        raise LlamaBenchError(f"llama-bench did not finish in {TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or done.stdout.strip().splitlines()[-1:] or ["no output"]
        raise LlamaBenchError(f"llama-bench {exit_reason(done.returncode)}: {tail[0]}")
    fig = parse(done.stdout)
    fig["command"] = " ".join(cmd)
    return fig


def file_decode_bytes(gguf: Path) -> int:
    """Bytes llama.cpp streams per decoded token from this file: its tensors (llama-bench's model_size), less the
    token table where the file has its own output head (decode then looks one row of the table up)."""
    from ..quant.gguf_tensors import open_reader   # torch: `llmchat bench` checks its flags (this module) first
    tensors = {t.name: t.n_bytes for t in open_reader(gguf).tensors}
    total = sum(tensors.values())
    return total - tensors.get("token_embd.weight", 0) if "output.weight" in tensors else total

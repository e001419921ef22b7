"""`llmchat bench FILE.gguf --workload ... --llama-server PATH`: llama.cpp's server on the same GGUF file and the
same workloads, plain and with each of its draft-free speculation modes (`--spec-type`), as the anchor of the
speculation figures (engine/bench/speculation.py).

Each mode gets a server of its own (`-t THREADS -np 1`, on 127.0.0.1, a free port), started after llmchat's engine
is gone. Each workload is sent as a greedy non-streamed chat completion, twice; the figure is the better of its
`timings.predicted_per_second` (decode tokens/s, the prompt excluded), with `draft_n` / `draft_n_accepted` where
the server guessed. Failures are LlamaServerError messages, never a crash of the run that measured llmchat.
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

SPEC_TYPES = ("none", "ngram-simple", "ngram-mod")
START_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 1800


class LlamaServerError(RuntimeError):
    pass


def check_binary(binary) -> Path:
    """The llama-server executable, or a LlamaServerError saying what is wrong with the path."""
    path = Path(binary).expanduser()
    if not path.is_file():
        raise LlamaServerError(f"--llama-server: {path} is not a file (build llama.cpp's llama-server: "
                               "docs/performance.md, 'Measuring against llama.cpp')")
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LlamaServerError(f"--llama-server: {path} does not run: {exc}") from None
    if done.returncode != 0:
        raise LlamaServerError(f"--llama-server: {path} --version failed (exit code {done.returncode})")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(binary: Path, gguf: Path, threads: int, port: int, spec_type: str, context: int) -> list[str]:
    cmd = [str(binary), "-m", str(gguf), "-t", str(threads), "-c", str(context), "-np", "1",
           "--host", "127.0.0.1", "--port", str(port)]
    return cmd if spec_type == "none" else [*cmd, "--spec-type", spec_type]


@contextmanager
def running_server(binary: Path, gguf: Path, threads: int, spec_type: str, context: int = 8192):
    """A llama-server process, ready (its /health answers 200), stopped on exit; yields its base URL."""
    port = free_port()
    cmd = command(binary, gguf, threads, port, spec_type, context)
    log = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(log, url)
        yield url
    finally:
        log.terminate()
        try:
            log.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log.kill()
            log.wait()


def _wait_ready(proc: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (proc.stderr.read() or "").strip().splitlines()[-1:] or ["no output"]
            raise LlamaServerError(f"llama-server exited at start (code {proc.returncode}): {tail[0]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass   # still loading (503) or not listening yet
        time.sleep(0.25)   # polling a child process's port: there is no event to wait on
    raise LlamaServerError(f"llama-server was not ready within {START_TIMEOUT_S} s")


def chat(url: str, messages: list[dict], max_tokens: int) -> dict:
    """One greedy, non-streamed chat completion: its text and llama-server's own timings."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as reply:
            answer = json.loads(reply.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as exc:
        raise LlamaServerError(f"llama-server's chat completion failed: {exc}") from None
    timings = answer.get("timings") or {}
    if "predicted_per_second" not in timings:
        raise LlamaServerError("llama-server's reply has no timings.predicted_per_second")
    return {"text": answer["choices"][0]["message"].get("content") or "",
            "decode_tok_s": float(timings["predicted_per_second"]), "tokens": int(timings.get("predicted_n", 0)),
            "drafted": int(timings.get("draft_n", 0)), "accepted": int(timings.get("draft_n_accepted", 0))}


def run(binary: Path, gguf: Path, threads: int, workloads: dict[str, list[dict]], new_tokens: int,
        spec_types=SPEC_TYPES, runs: int = 2) -> dict:
    """{spec type: {workload: best of `runs` chats}}, each with `same_text` against the plain server's reply."""
    figures: dict = {}
    for spec in spec_types:
        with running_server(binary, gguf, threads, spec) as url:
            figures[spec] = {}
            for name, messages in workloads.items():
                replies = [chat(url, messages, new_tokens) for _ in range(runs)]
                figures[spec][name] = max(replies, key=lambda r: r["decode_tok_s"])
    for spec in spec_types:
        for name in workloads:
            figures[spec][name]["same_text"] = figures[spec][name]["text"] == figures["none"][name]["text"]
    for spec in spec_types:
        for name in workloads:
            figures[spec][name].pop("text")
    return {"threads": threads, "command": " ".join(command(binary, gguf, threads, 0, "SPEC", 8192)),
            "figures": figures}

"""`llmchat bench MODEL --serve`: what HTTP costs. 1/8/16 concurrent streaming clients of `llmchat serve`
vs the same streams on the in-process AsyncEngine, in one run, rounds alternating so both sides see the same
machine state; aggregate tok/s, mean time to the first text (TTFT) and their ratios. Then what HTTP adds to
one client's TTFT: single requests one after another (one new token each), alternating sides, the medians
compared (a round's TTFT is one sample and swings with the machine; the median of many is what a user sees),
sent over one kept-alive connection by a hand-written client so that the figure is the server's, not httpx's.

Both sides run the same requests: random token-id prompts (distinct per round, so no prefix-cache hits),
greedy, a fixed number of new tokens. The server runs in its own process, as users run it; the HTTP clients
(httpx, decoding only the events they need) run in this one, on the same cores.
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import psutil
import torch

from ..async_engine import AsyncEngine
from ..sampling_params import SamplingParams
from ..serve.run import bind_socket
from .common import prompt_ids


async def _engine_round(engine, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)

    async def one(prompt):
        start, first, count = time.perf_counter(), None, 0
        async for delta in engine.generate(prompt, params):
            if delta.text and first is None:   # the first text, as an HTTP client sees its first event
                first = time.perf_counter() - start
            count += len(delta.token_ids)
        return first, count
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(p) for p in prompts))
    wall = time.perf_counter() - t0
    return sum(c for _, c in results) / wall, sum(f for f, _ in results) / len(results)


async def _http_round(client: httpx.AsyncClient, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    async def one(prompt):
        body = {"model": None, "prompt": prompt, "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        start, first, count = time.perf_counter(), None, 0
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"llmchat serve answered {r.status_code}: {(await r.aread())[:200]!r}")
            async for line in r.aiter_lines():
                # a light client: decode only the events that matter (the first text, the usage at the end)
                if first is None and line.startswith("data: {"):
                    event = json.loads(line[6:])
                    if event["choices"] and event["choices"][0]["text"]:
                        first = time.perf_counter() - start
                elif line.startswith('data: {') and '"usage": {' in line:
                    count = json.loads(line[6:])["usage"]["completion_tokens"]
        return first or 0.0, count
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(p) for p in prompts))
    wall = time.perf_counter() - t0
    return sum(c for _, c in results) / wall, sum(f for f, _ in results) / len(results)


async def _raw_stream_ttft(reader, writer, body: dict) -> float:
    """One streamed request on a kept-alive connection, written and read by hand: the time to its first event
    with no client library in it (httpx alone costs a few ms per request here)."""
    data = json.dumps(body).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(data)) + data
    start, first, buf = time.perf_counter(), None, b""
    writer.write(request)
    await writer.drain()
    while not (b"data: [DONE]" in buf and buf.endswith(b"\r\n\r\n")):
        chunk = await reader.read(65536)
        if not chunk:
            raise RuntimeError("llmchat serve closed the connection")
        buf += chunk
        if first is None and b"data: {" in buf:
            first = time.perf_counter() - start
    if not buf.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"llmchat serve answered {buf[:60]!r}")
    return first


async def _single_ttfts(engine, base_url: str, prompt_len: int, vocab: int, samples: int) -> dict:
    """Median time to the first text of lone requests (nothing else running), in-process and over HTTP."""
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    times = {"engine": [], "http": []}
    try:
        for i in range(samples):
            for side in (("engine", "http") if i % 2 == 0 else ("http", "engine")):
                prompt = prompt_ids(prompt_len, 777_000 + 2 * i + (side == "http"), vocab)
                if side == "engine":
                    start = time.perf_counter()
                    async for _ in engine.generate(prompt, params):
                        break
                    times[side].append(time.perf_counter() - start)
                else:
                    body = {"model": None, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True}
                    times[side].append(await _raw_stream_ttft(reader, writer, body))
    finally:
        writer.close()
    engine_ms, http_ms = (statistics.median(times[k]) * 1e3 for k in ("engine", "http"))
    return {"samples": samples, "engine_ms": engine_ms, "http_ms": http_ms, "http_extra_ms": http_ms - engine_ms}


def _start_server(model_path, port: int, engine_kwargs: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "llmchat.engine.serve", str(model_path), "--port", str(port),
           "--engine", json.dumps(engine_kwargs)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _wait_ready(proc: subprocess.Popen, base_url: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmchat serve exited with {proc.returncode}: {proc.stderr.read()[-500:]}")
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("llmchat serve did not become ready")


def _cpu_seconds(process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _measure(engine, base_url: str, clients: list[int], new_tokens: int, prompt_len: int, rounds: int,
                   vocab: int, server_process=None, ttft_samples: int = 20) -> dict:
    """Best round of each side per client count; CPU time per token of this process (in-process engine) and
    of the server process (HTTP side), when it is ours to watch."""
    me = psutil.Process()
    limits = httpx.Limits(max_connections=max(clients) + 4, max_keepalive_connections=max(clients) + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0), limits=limits) as client:
        warm = [prompt_ids(prompt_len, 1, vocab)]
        await _engine_round(engine, warm, 8)
        await _http_round(client, warm, 8)
        figures = {}
        for k in clients:
            best = {"engine": (0.0, 0.0), "http": (0.0, 0.0)}
            cpu = {"engine": 0.0, "http": 0.0}
            for r in range(rounds):
                for side in (("engine", "http") if r % 2 == 0 else ("http", "engine")):
                    prompts = [prompt_ids(prompt_len, 10_000 * k + 100 * r + i + (50 if side == "http" else 0), vocab)
                               for i in range(k)]
                    watched = me if side == "engine" else server_process
                    cpu0 = _cpu_seconds(watched) if watched is not None else 0.0
                    got = (await _engine_round(engine, prompts, new_tokens) if side == "engine"
                           else await _http_round(client, prompts, new_tokens))
                    cpu[side] += (_cpu_seconds(watched) - cpu0) if watched is not None else 0.0
                    if got[0] > best[side][0]:
                        best[side] = got
            (e_tok, e_ttft), (h_tok, h_ttft) = best["engine"], best["http"]
            figures[k] = {"engine_tok_s": e_tok, "http_tok_s": h_tok, "http_over_engine": h_tok / e_tok,
                          "engine_ttft_ms": e_ttft * 1e3, "http_ttft_ms": h_ttft * 1e3,
                          "http_ttft_extra_ms": (h_ttft - e_ttft) * 1e3}
            if server_process is not None:   # CPU per token, mean over the rounds (the engine's share included)
                tokens = rounds * k * new_tokens
                figures[k]["engine_cpu_us_per_token"] = cpu["engine"] / tokens * 1e6
                figures[k]["server_cpu_us_per_token"] = cpu["http"] / tokens * 1e6
        single = await _single_ttfts(engine, base_url, prompt_len, vocab, ttft_samples) if ttft_samples else None
        return figures, single


def run(model_path, clients=(1, 8, 16), new_tokens: int = 64, prompt_len: int = 32, rounds: int = 3,
        dtype: str = "auto", kv_cache_gb: float = 1.0, num_threads: int | None = None,
        attention_backend: str = "kernels", quantize: str | None = None, server_url: str | None = None,
        ttft_samples: int = 20) -> dict:
    """server_url: measure a server already running (the same model and settings) instead of starting one."""

    engine_kwargs = dict(dtype=dtype, kv_cache_gb=kv_cache_gb, num_threads=num_threads,
                         attention_backend=attention_backend, quantize=quantize)
    proc = None
    if server_url is None:
        sock = bind_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        sock.close()
        server_url = f"http://127.0.0.1:{port}"
        proc = _start_server(model_path, port, engine_kwargs)
    base_url = server_url
    try:
        engine = AsyncEngine(model_path, **engine_kwargs)
        if proc is not None:
            _wait_ready(proc, base_url)
        vocab = engine.engine.vocab_size

        async def main():
            try:
                watched = psutil.Process(proc.pid) if proc is not None else None
                return await _measure(engine, base_url, list(clients), new_tokens, prompt_len, rounds, vocab,
                                      watched, ttft_samples)
            finally:
                await engine.shutdown()
        figures, single = asyncio.run(main())
        return {"model": str(model_path), "dtype": str(engine.engine.runner.dtype).replace("torch.", ""),
                "threads": torch.get_num_threads(), "new_tokens": new_tokens, "prompt_len": prompt_len,
                "rounds": rounds, "clients": {str(k): v for k, v in figures.items()}, "single_ttft": single}
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def format_report(r: dict) -> str:
    lines = [f"llmchat bench --serve: {r['model']} ({r['dtype']}, {r['threads']} threads; {r['new_tokens']} new "
             f"tokens per stream, {r['prompt_len']}-token prompts, best of {r['rounds']} alternating rounds)",
             f"{'clients':>7}{'in-process tok/s':>18}{'HTTP tok/s':>12}{'HTTP/in-proc':>14}"
             f"{'TTFT in-proc ms':>17}{'TTFT HTTP ms':>14}{'+ms':>8}"]
    for k, f in r["clients"].items():
        lines.append(f"{k:>7}{f['engine_tok_s']:>18.1f}{f['http_tok_s']:>12.1f}{f['http_over_engine']:>13.1%} "
                     f"{f['engine_ttft_ms']:>16.1f}{f['http_ttft_ms']:>14.1f}{f['http_ttft_extra_ms']:>8.1f}")
    cpu = [(k, f) for k, f in r["clients"].items() if "server_cpu_us_per_token" in f]
    if cpu:
        lines.append("CPU per token, engine included: " + ", ".join(
            f"{k} clients: in-process {f['engine_cpu_us_per_token']:.0f} us, server {f['server_cpu_us_per_token']:.0f} us"
            for k, f in cpu) + " (the HTTP clients' own CPU is on the same cores and not counted)")
    single = r.get("single_ttft")
    if single:
        lines.append(f"TTFT of a lone request, median of {single['samples']}: in-process {single['engine_ms']:.2f} ms, "
                     f"HTTP {single['http_ms']:.2f} ms ({single['http_extra_ms']:+.2f} ms; a bare HTTP/1.1 client)")
    return "\n".join(lines)

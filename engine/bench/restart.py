"""A chat reopened after a restart (`llmchat bench MODEL --restart`): the KV disk tier (engine/kv_disk.py)
against computing the chat again, each run a process of its own, as a restart is.

1. disk on, an empty cache folder: the chat (prefix tokens) and its reply; its blocks go to disk;
2. disk off: the chat, its reply and one more message, cold: the time to first token a restart costs today;
3. disk on, the same folder: the same prompt, warm: the chat's blocks read back;
4. disk off: the chat and its reply again, so decode speed is compared writing and not writing, alternated.
Reported: warm / cold time to first token, the tokens read from disk, decode tok/s with the writer on and off
(the better of two runs each), and whether the warm reply's tokens equal the cold one's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from .common import fixed_length, prompt_ids

FOLLOW_UP = 24   # tokens of the one more message


def run(model_path, prefix_len: int = 4000, new_tokens: int = 64, **engine_kwargs) -> dict:
    from ..model_loader import read_config   # the vocabulary's size, for the seeded prompt
    vocab = read_config(model_path)["vocab_size"]
    chat = prompt_ids(prefix_len, seed=11, vocab=vocab)
    follow = prompt_ids(FOLLOW_UP, seed=12, vocab=vocab)
    with tempfile.TemporaryDirectory(prefix="llmchat-bench-kv-") as cache:
        first = _child(model_path, chat, new_tokens, True, cache, engine_kwargs)
        reopened = chat + first["token_ids"] + follow
        cold = _child(model_path, reopened, new_tokens, False, cache, engine_kwargs)
        warm = _child(model_path, reopened, new_tokens, True, cache, engine_kwargs)
        again = _child(model_path, chat, new_tokens, False, cache, engine_kwargs)
    return {"model": str(model_path), "prefix_len": prefix_len, "prompt_len": len(reopened),
            "new_tokens": new_tokens, "ttft_cold_s": cold["ttft"], "ttft_warm_s": warm["ttft"],
            "ttft_ratio": warm["ttft"] / cold["ttft"], "disk_tokens": warm["disk_tokens"],
            "decode_tok_s_disk_on": max(first["decode"], warm["decode"]),
            "decode_tok_s_disk_off": max(cold["decode"], again["decode"]),
            "same_tokens": warm["token_ids"] == cold["token_ids"]}


def _child(model_path, prompt: list[int], new_tokens: int, disk: bool, cache: str, engine_kwargs: dict) -> dict:
    env = {**os.environ, "LLMCHAT_CACHE_DIR": cache, "LLMCHAT_KV_DISK": "1" if disk else "0"}
    job = {"model": str(model_path), "prompt": prompt, "new_tokens": new_tokens, "engine": engine_kwargs}
    proc = subprocess.run([sys.executable, "-m", "llmchat.engine.bench.restart"], input=json.dumps(job),
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the benchmark's engine process failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _one_reply(job: dict) -> dict:
    """In the child: load, answer the prompt, say how long the first token took and how fast the rest came."""
    from ..llm import LLM
    llm = LLM(job["model"], **job["engine"])
    engine = llm.engine
    seq = engine.add_request(job["prompt"], fixed_length(job["new_tokens"]))
    started = time.perf_counter()
    first_at = None
    while not seq.is_finished:
        for delta in engine.step():
            if first_at is None and delta.token_ids:
                first_at = time.perf_counter()
    done = time.perf_counter()
    out = engine.output_of(seq)
    engine.flush_kv_disk(120)
    return {"ttft": first_at - started, "decode": (len(out.token_ids) - 1) / (done - first_at),
            "token_ids": out.token_ids, "disk_tokens": out.metrics.num_disk_cached_tokens}


def format_report(r: dict) -> str:
    on, off = r["decode_tok_s_disk_on"], r["decode_tok_s_disk_off"]
    return "\n".join([
        f"llmchat bench --restart: {r['model']} (a {r['prefix_len']}-token chat and its reply, the process "
        f"restarted, one more message: {r['prompt_len']} prompt tokens)",
        f"time to first token, cold (computed): {r['ttft_cold_s']:.2f} s",
        f"time to first token, warm (disk tier): {r['ttft_warm_s']:.2f} s = {r['ttft_ratio']:.1%} of cold; "
        f"{r['disk_tokens']} prompt tokens read from disk",
        f"decode while the disk tier writes: {on:.1f} tok/s vs {off:.1f} off ({on / off:.3f}x)",
        f"same tokens warm and cold: {'yes' if r['same_tokens'] else 'NO'}"])


if __name__ == "__main__":
    print(json.dumps(_one_reply(json.loads(sys.stdin.read()))))

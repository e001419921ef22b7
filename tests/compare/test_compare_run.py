"""`llmchat compare` end to end on two tiny models with the real engine."""
from __future__ import annotations

import json
import shutil

from llmchat.engine import LLM
from llmchat.engine.compare.plan import CompareSettings
from llmchat.engine.compare.prompts import load_prompts
from llmchat.tui.cli import main
from run_args import compare_argv
from report_checks import assert_report_files_agree, without_timings

ARGS = ["--max-tokens", "4", "--kv-cache-gb", "0.02"]


def test_report_agrees_and_outputs_equal_single_requests(compare_models, compare_adapter, prompt_file,
                                                         straight_run):
    report = assert_report_files_agree(straight_run)
    assert [m["id"] for m in report["models"]] == ["tiny-llama", "tiny-llama+tiny-lora", "tiny-qwen"]
    assert report["models"][1]["adapter"] == str(compare_adapter)
    assert all(m["status"] == "ok" for m in report["models"]) and report["errors"] == []
    assert report["run"]["complete"] and report["run"]["settings"]["seed"] == 7
    for model_id, summary in report["summary"].items():
        rows = [row[model_id] for row in report["results"]]
        assert summary["requests"] == 5 and summary["scored"] == 2
        assert summary["generated_tokens"] == sum(len(r["token_ids"]) for r in rows)
        assert summary["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows) > 0
        assert summary["cached_tokens"] == sum(r["cached_tokens"] for r in rows)
    tokens = {m["id"]: [row[m["id"]]["token_ids"] for row in report["results"]] for m in report["models"]}
    assert tokens["tiny-llama"] != tokens["tiny-qwen"]
    assert tokens["tiny-llama"] != tokens["tiny-llama+tiny-lora"]          # the adapter is applied

    # Each batched answer equals the same request run alone (same settings, seed = 7 + index).
    prompts, _ = load_prompts(prompt_file)
    settings = CompareSettings(max_tokens=6, temperature=0.8, top_k=20, seed=7)
    llama, qwen = compare_models["llama"], compare_models["qwen"]
    for model_id, path, adapter in (("tiny-llama", llama, None), ("tiny-llama+tiny-lora", llama, "lora"),
                                    ("tiny-qwen", qwen, None)):
        llm = LLM(path, kv_cache_gb=0.02)
        if adapter:
            llm.load_adapter(adapter, compare_adapter)
        for item in prompts:
            single = llm.generate([item.engine_input()], settings.sampling_params(item.index), adapter=adapter)[0]
            got = report["results"][item.index][model_id]
            assert (got["token_ids"], got["text"], got["finish_reason"]) == (
                single.token_ids, single.text, single.finish_reason), (model_id, item.index)
        del llm


def test_same_inputs_same_outputs_and_edited_prompts_rerun(compare_models, compare_adapter, prompt_file,
                                                           straight_run, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [*compare_argv(compare_models, compare_adapter, prompt_file), "--out", str(out)]
    assert main(argv) == 0
    assert "report: " in capsys.readouterr().out
    same = json.loads((out / "report.json").read_text())
    assert without_timings(same) == without_timings(json.loads((straight_run / "report.json").read_text()))
    # Edit one prompt, then resume: only that prompt runs again, for every model.
    edited = tmp_path / "prompts.jsonl"
    lines = prompt_file.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = json.dumps({"prompt": "How are you tonight?"}) + "\n"
    edited.write_text("".join(lines), encoding="utf-8")
    argv[argv.index(str(prompt_file))] = str(edited)
    assert main([*argv, "--resume"]) == 0
    assert (out / "results.jsonl").read_text().count("\n") == 3 * 5 + 3
    report = json.loads((out / "report.json").read_text())
    assert report["prompts"][1]["prompt"] == "How are you tonight?"
    for i in (0, 2, 3, 4):
        assert report["results"][i] == same["results"][i]


def test_bad_inputs_are_reported_and_the_rest_completes(compare_models, compare_adapter, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    too_long = json.dumps({"prompt": "fox " * 600})          # more tokens than the tiny models' context
    prompts.write_text('{"prompt": "Hello world", "expected": "Hello"}\n'
                       '{"prompt": "broken\n'
                       '{"messages": [{"role": "wizard", "content": "hi"}]}\n'
                       '{"prompt": "Once upon a time"}\n' + too_long + "\n", encoding="utf-8")
    llama, qwen = str(compare_models["llama"]), str(compare_models["qwen"])
    broken = tmp_path / "broken-llama"           # config and weights disagree: found, but fails to load
    shutil.copytree(llama, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "intermediate_size": 100}))
    out = tmp_path / "out"
    code = main(["compare", "--models", llama, "no-such-model", str(broken), qwen, "--prompts", str(prompts), "--out", str(out),
                 "--adapters", f"{qwen}={compare_adapter}", f"{llama}={tmp_path / 'missing-adapter'}", *ARGS])
    assert code == 1
    err = capsys.readouterr().err
    assert "line 2: invalid JSON" in err and "line 3: messages[0] has role 'wizard'" in err
    report = assert_report_files_agree(out)
    status = {m["id"]: m["status"] for m in report["models"]}
    assert status == {"tiny-llama": "ok", "tiny-llama+missing-adapter": "error", "no-such-model": "error",
                      "broken-llama": "error", "tiny-qwen": "ok", "tiny-qwen+tiny-lora": "error"}
    errors = [(e["kind"], e["line"], e["model"]) for e in report["errors"]]
    assert errors == [("prompt", 2, None), ("prompt", 3, None), ("adapter", None, "tiny-llama+missing-adapter"),
                      ("model", None, "no-such-model"), ("model", None, "broken-llama"),
                      ("adapter", None, "tiny-qwen+tiny-lora"),
                      ("request", 5, "tiny-llama"), ("request", 5, "tiny-qwen")]
    assert "context" in report["errors"][-1]["message"]
    assert report["results"][2]["tiny-qwen"]["finish_reason"] == "error"
    messages = {e["model"]: e["message"] for e in report["errors"]}
    assert "unknown model 'no-such-model'" in messages["no-such-model"]
    assert messages["broken-llama"].startswith(f"cannot load model {str(broken)!r}: ")
    assert "adapter was trained for" in messages["tiny-qwen+tiny-lora"]
    assert "missing-adapter" in messages["tiny-llama+missing-adapter"]
    # The good parts ran: the valid prompts (file lines 1 and 4) on both base models.
    assert [p["line"] for p in report["prompts"]] == [1, 4, 5]
    for model_id in ("tiny-llama", "tiny-qwen"):
        assert all(row[model_id]["error"] is None and row[model_id]["token_ids"] for row in report["results"][:2])
        assert report["summary"][model_id]["requests"] == 3 and report["summary"][model_id]["errors"] == 1
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Errors" in md and "prompt error (line 2): invalid JSON" in md


def test_argument_errors_exit_2_with_a_message(compare_models, prompt_file, tmp_path, capsys):
    llama = str(compare_models["llama"])
    base = ["compare", "--prompts", str(prompt_file), "--out", str(tmp_path / "o")]
    assert main([*base, "--models", llama, "--adapters", "other=/x"]) == 2
    assert "'other' is not one of --models" in capsys.readouterr().err
    assert main([*base, "--models", llama, "--temperature", "-1"]) == 2
    assert "temperature must be >= 0" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["compare", "--models", llama, "--prompts", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "no usable prompts" in capsys.readouterr().err
    assert main(["compare", "--models", llama, "--prompts", str(tmp_path / "nope.txt"), "--out", "o"]) == 2
    assert "prompt file not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # the same model twice runs once, and says so (the bad temperature stops it before any work)
    assert main([*base, "--models", llama, llama, "--temperature", "-1"]) == 2
    assert f"{llama} is given 2 times in --models: it runs once" in capsys.readouterr().err


def test_each_engine_is_freed_before_the_next_model_loads(compare_models, prompt_file, tmp_path):
    import weakref

    from llmchat.engine.compare import CompareSettings, build_variants, load_prompts
    from llmchat.engine.compare.report import CompareInputs
    from llmchat.engine.compare.runner import CompareRunner
    from llmchat.engine.compare.store import ResultStore

    engines = []

    def make_engine(path, settings):
        alive = [ref for ref in engines if ref() is not None]
        assert not alive, "the previous model's engine is still in memory"
        llm = LLM(path, kv_cache_gb=settings.kv_cache_gb)
        engines.append(weakref.ref(llm.engine))
        return llm

    prompts, errors = load_prompts(prompt_file)
    inputs = CompareInputs(prompt_file, prompts, errors,
                           build_variants([str(compare_models["llama"]), str(compare_models["qwen"])]),
                           CompareSettings(max_tokens=2, kv_cache_gb=0.02))
    out = tmp_path / "out"
    report = CompareRunner(inputs, ResultStore(out / "results.jsonl"), out, make_engine=make_engine).run()
    assert len(engines) == 2 and engines[-1]() is None
    assert all(m["status"] == "ok" for m in report["models"])


def test_on_output_reports_each_request_as_it_finishes(compare_models):
    from llmchat.engine import SamplingParams

    llm = LLM(compare_models["qwen"], kv_cache_gb=0.02)
    seen = []
    outs = llm.generate(["Hello", "Once upon a time there was"],
                        [SamplingParams(max_tokens=2, temperature=0), SamplingParams(max_tokens=7, temperature=0,
                                                                                     ignore_eos=True)],
                        on_output=lambda i, out: seen.append((i, out.token_ids)))
    assert sorted(seen) == [(0, outs[0].token_ids), (1, outs[1].token_ids)]
    assert seen[0][0] == 0                     # the 2-token request is reported before the 7-token one

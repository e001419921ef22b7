"""`llmchat run` in a subprocess prints the streamed reply; bad input gives a message, not a traceback."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from tiny_models import make_model, make_tokenizer

from llmchat.engine import LLM, SamplingParams


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "run", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_run_prints_the_same_reply_as_the_api(tiny_model_dir):
    folder = tiny_model_dir("qwen2")
    proc = run_cli(folder, "Hello world!", "--system", "Be brief.", "--max-tokens", "12",
                   "--temperature", "0", "--attention", "torch", "-v")
    assert proc.returncode == 0, proc.stderr
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello world!"}]
    expected = LLM(folder, attention_backend="torch").generate(
        [chat], SamplingParams(max_tokens=12, temperature=0.0))[0]
    assert proc.stdout == expected.text + "\n"
    assert "KV cache" in proc.stderr and "tok/s" in proc.stderr
    # one request: the cache holds one sequence of the model's context (its memory is committed as it fills),
    # not 64 sequences' worth of a quarter of free RAM
    blocks = int(re.search(r"= (\d+) blocks of 16 tokens", proc.stderr).group(1))
    context = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    assert blocks * 16 >= len(expected.prompt_token_ids) + 12 and blocks * 16 <= context
    proc = run_cli(folder, "Hello world!", "--max-tokens", "2", "--attention", "torch", "-v", "--kv-cache-gb", "0.01")
    assert int(re.search(r"= (\d+) blocks", proc.stderr).group(1)) > 100      # the flag still decides


def test_run_reports_bad_input_without_traceback(tiny_model_dir, tmp_path):
    proc = run_cli(tiny_model_dir("qwen2"), "hi", "--temperature", "-1", "--attention", "torch")
    assert proc.returncode == 2
    assert "llmchat: error: temperature must be >= 0" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli(tmp_path / "nowhere", "hi")
    assert proc.returncode == 2 and "llmchat: error:" in proc.stderr and "Traceback" not in proc.stderr


def test_run_constrains_the_reply_to_a_json_schema_or_a_grammar(tiny_model_dir, tmp_path):
    folder = tiny_model_dir("qwen2")
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer",
              "minimum": 0, "maximum": 9}}, "required": ["answer", "n"], "additionalProperties": False}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    proc = run_cli(folder, "Answer in JSON.", "--json-schema", tmp_path / "schema.json", "--temperature", "0",
                   "--attention", "torch")
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout)
    assert set(reply) == {"answer", "n"} and reply["answer"] in ("yes", "no") and 0 <= reply["n"] <= 9
    proc = run_cli(folder, "Answer.", "--json-schema", '{"enum": ["red", "blue"]}', "--temperature", "0",
                   "--attention", "torch")
    assert json.loads(proc.stdout) in ("red", "blue")
    (tmp_path / "colour.gbnf").write_text('root ::= "colour: " ("red" | "green") "!"')
    proc = run_cli(folder, "Colour?", "--grammar", tmp_path / "colour.gbnf", "--attention", "torch")
    assert proc.returncode == 0 and proc.stdout in ("colour: red!\n", "colour: green!\n"), proc.stderr


def test_run_reports_a_bad_schema_or_grammar_in_one_line(tiny_model_dir, tmp_path):
    folder = tiny_model_dir("qwen2")
    (tmp_path / "broken.json").write_text("{oops")
    (tmp_path / "bad.gbnf").write_text("root ::= undefined-rule")
    for args, message in [(("--json-schema", tmp_path / "broken.json"), "--json-schema: not valid JSON"),
                          (("--json-schema", tmp_path / "missing.json"), "cannot read"),
                          (("--json-schema", '{"type": "nonsense"}'), "--json-schema: "),
                          (("--grammar", tmp_path / "bad.gbnf"), "--grammar: "),
                          (("--grammar", tmp_path / "x.gbnf", "--json-schema", "{}"), "not allowed with")]:
        proc = run_cli(folder, "hi", *args, "--attention", "torch")
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_run_with_a_draft_model_prints_the_same_reply_and_names_a_bad_draft(tiny_model_dir, tmp_path):
    folder = tiny_model_dir("qwen2")
    common = ["Hello world!", "--max-tokens", "12", "--temperature", "0", "-v"]
    plain = run_cli(folder, *common, "--speculative", "off")
    drafted = run_cli(folder, *common, "--draft", folder)   # the model drafting for itself: its guesses hold
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout
    held = re.search(r"guessed (\d+) tokens, (\d+) held", drafted.stderr)
    assert held and int(held.group(2)) > 0, drafted.stderr
    other = make_model(tmp_path / "other-vocab", "llama", num_hidden_layers=1)
    tokenizer = make_tokenizer()
    tokenizer.add_tokens(["<|a-token-only-the-draft-has|>"])
    tokenizer.save_pretrained(other)
    for draft, says in ((tmp_path / "nowhere", "--draft:"), (other, "another tokenizer")):
        proc = run_cli(folder, "hi", "--draft", draft)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = run_cli(folder, "hi", "--draft", folder, "--speculative", "off")
    assert proc.returncode == 2 and "--speculative off" in proc.stderr

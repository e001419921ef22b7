"""Models without a chat template (base models, many base-model GGUF files): they load and register, raw text
runs, chat messages get NoChatTemplateError naming the known template the vocabulary suggests, which a caller
can apply; `llmchat run` says so in one line and runs with --raw or --chat-template."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from engine_helpers import hf_greedy
from tiny_models import make_model, make_tokenizer

from gguf_models import write_gguf
from llmchat.engine import LLM, SamplingParams
from llmchat.engine.chat_templates import KNOWN_TEMPLATES, NoChatTemplateError, suggested_template, use_template

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello world!"}]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A tiny model whose tokenizer has no chat template (ChatML tokens in its vocabulary, as Qwen bases)."""
    folder = tmp_path_factory.mktemp("base")
    with_template = make_model(tmp_path_factory.mktemp("chat"), "qwen2")
    shutil.copytree(with_template, folder, dirs_exist_ok=True)
    tok = make_tokenizer()
    tok.chat_template = None
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tok.save_pretrained(folder)
    return folder


def test_raw_text_runs_and_chats_say_what_to_do(base_model):
    llm = LLM(base_model, attention_backend="torch")
    assert llm.tokenizer.chat_template is None
    out = llm.generate(["Once upon a time"], GREEDY)[0]
    assert out.token_ids == hf_greedy(base_model, out.prompt_token_ids, 8, ignore_eos=True)
    with pytest.raises(NoChatTemplateError, match="raw text, or use the 'chatml' chat template") as err:
        llm.generate([CHAT], GREEDY)
    assert err.value.suggested == "chatml"


def test_the_known_template_renders_as_the_family_does(base_model):
    llm = LLM(base_model, attention_backend="torch")
    use_template(llm.tokenizer, "chatml")
    reply = llm.generate([CHAT], GREEDY)[0]
    chat = make_tokenizer()        # the same ChatML the tiny chat models ship
    rendered = chat.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert reply.prompt_token_ids == chat(rendered, add_special_tokens=False).input_ids


def test_gemma_template_folds_the_system_text_into_the_first_user_turn():
    tok = make_tokenizer()
    use_template(tok, "gemma")
    text = tok.apply_chat_template(CHAT + [{"role": "assistant", "content": "Hi."}, {"role": "user", "content": "More"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == ("<start_of_turn>user\nBe brief.\n\nHello world!<end_of_turn>\n<start_of_turn>model\nHi.<end_of_turn>\n"
                    "<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n")
    assert suggested_template(tok) == "chatml" and set(KNOWN_TEMPLATES) >= {"gemma", "llama3", "phi3", "granite"}


def test_a_gguf_without_chat_template_registers_and_runs_raw(base_model, tmp_path, monkeypatch):
    from llmchat.engine.store import ModelStore
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    path = write_gguf(base_model, tmp_path / "base.gguf", chat_template=False)
    model = ModelStore(tmp_path / "data").import_path(path)
    assert model.supported
    llm = LLM(str(model.path), dtype="float32", kv_cache_gb=0.02)
    with pytest.raises(NoChatTemplateError):
        llm.generate([CHAT], GREEDY)
    assert llm.generate(["Once upon a time"], GREEDY)[0].token_ids == \
        LLM(base_model, attention_backend="torch").generate(["Once upon a time"], GREEDY)[0].token_ids


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "run", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_run_offers_raw_and_the_known_template(base_model):
    proc = run_cli(base_model, "Hello", "--max-tokens", "4", "--attention", "torch")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--chat-template chatml" in proc.stderr and "--raw" in proc.stderr
    for flag in ("--raw", "--chat-template=chatml"):
        proc = run_cli(base_model, "Hello", "--max-tokens", "4", "--attention", "torch", flag)
        assert proc.returncode == 0, proc.stderr

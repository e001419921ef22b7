"""The engine loads a model's tokenizer without building transformers' config class for it (engine/chat.py
_tokenizer_facts): the same tokenizer as AutoTokenizer's own lookup, and none of the modeling stack that lookup
imports (torch.distributed, sympy: ~75 MB resident)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from real_model import smollm2_folder
from tiny_models import ARCHS
from transformers import AutoTokenizer

from llmchat.engine.chat import load_tokenizer

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]


def assert_same_tokenizer(folder) -> None:
    ours, theirs = load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert type(ours) is type(theirs)
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.all_special_ids == theirs.all_special_ids
    text = "Hello world, 12345 <|im_end|> café\n\tnext line"
    assert ours(text).input_ids == theirs(text).input_ids
    assert ours.decode(theirs(text).input_ids) == theirs.decode(theirs(text).input_ids)
    if theirs.chat_template:
        assert ours.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == \
            theirs.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    """No tokenizer snapshot from another test: these check the cold load (the snapshot's own tests are in
    test_tokenizer_snapshot.py)."""
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_tokenizer_is_autotokenizers_for_every_family(tiny_model_dir, arch):
    assert_same_tokenizer(tiny_model_dir(arch))


def test_the_tokenizer_of_the_real_smollm2_is_autotokenizers():
    assert_same_tokenizer(smollm2_folder())


def test_running_a_model_does_not_import_transformers_modeling_stack(tiny_model_dir):
    script = (
        "import sys\n"
        "from llmchat.engine import LLM, SamplingParams\n"
        f"llm = LLM({str(tiny_model_dir('llama'))!r}, kv_cache_gb=0.01)\n"
        "llm.generate(['hello'], SamplingParams(max_tokens=4, temperature=0.0))\n"
        "heavy = [m for m in ('sympy', 'torch._dynamo', 'torch.distributed.tensor', 'transformers.modeling_utils')"
        " if m in sys.modules]\n"
        "print(','.join(heavy) or 'none')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "none"

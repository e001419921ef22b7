"""Engine + LoRA equals transformers + peft token for token (fp32) for every architecture, on both LoRA paths
(the fused kernel, default with the kernels backend; the torch oracle), and a mixed batch (base, two adapters,
a repeated adapter) equals each request run alone."""
from __future__ import annotations

import functools

import pytest
from lora_helpers import PROMPTS, edit_config, hf_greedy, make_adapter
from tiny_models import ARCHS

from llmchat.engine import LLM, SamplingParams

MAX_NEW = 10
GREEDY = SamplingParams(max_tokens=MAX_NEW, temperature=0.0)


@functools.lru_cache(maxsize=None)
def reference(model_dir: str, adapter_dir: str | None, prompt: tuple[int, ...]) -> list[int]:
    return hf_greedy(model_dir, adapter_dir, list(prompt), MAX_NEW)


@pytest.fixture(scope="module", params=ARCHS)
def setup(request, tiny_model_dir, tmp_path_factory):
    """(model dir, adapter "all": every projection r=8; adapter "some": q/v/down only, r=4, other alpha)."""
    model = tiny_model_dir(request.param)
    tmp = tmp_path_factory.mktemp(f"lora-{request.param}")
    all_dir = make_adapter(model, tmp / "all", r=8, alpha=16, seed=1)
    some_dir = make_adapter(model, tmp / "some", r=4, alpha=4, targets=("q_proj", "v_proj", "down_proj"), seed=2)
    return model, {"all": all_dir, "some": some_dir}


def engine(model, backend: str) -> LLM:
    """backend "kernels": the fused lora_apply path; "torch": the fp32 torch path (the oracle)."""
    llm = LLM(model, attention_backend=backend)
    assert (llm.engine.lora.fused_op is not None) == (backend == "kernels")
    return llm


@pytest.mark.parametrize("backend", ["kernels", "torch"])
def test_greedy_with_adapter_equals_transformers_peft(setup, backend):
    model, adapters = setup
    llm = engine(model, backend)
    for name, folder in adapters.items():
        llm.load_adapter(name, folder)
    for name, folder in adapters.items():
        outputs = llm.generate(PROMPTS, GREEDY, adapter=name)
        for prompt, out in zip(PROMPTS, outputs):
            assert out.token_ids == reference(str(model), str(folder), tuple(prompt)), (name, prompt)
            assert out.adapter == name
    # The adapters really change the model: otherwise this test would prove nothing.
    base = [reference(str(model), None, tuple(p)) for p in PROMPTS]
    assert base != [reference(str(model), str(adapters["all"]), tuple(p)) for p in PROMPTS]
    assert base != [reference(str(model), str(adapters["some"]), tuple(p)) for p in PROMPTS]


def test_mixed_batch_equals_each_request_alone(setup):
    model, adapters = setup
    llm = LLM(model)            # default attention backend (kernels when built)
    for name, folder in adapters.items():
        llm.load_adapter(name, folder)
    jobs = [(PROMPTS[0], None), (PROMPTS[1], "all"), (PROMPTS[2], "some"), (PROMPTS[0], "all"),
            (PROMPTS[2], None), (PROMPTS[1], "some")]
    together = llm.generate([p for p, _ in jobs], GREEDY, adapter=[a for _, a in jobs])
    for (prompt, name), out in zip(jobs, together):
        alone = llm.generate([prompt], GREEDY, adapter=name)[0]
        assert out.token_ids == alone.token_ids, (prompt, name)
    assert together[0].token_ids != together[3].token_ids      # same prompt, base vs adapter


@pytest.mark.parametrize("backend", ["kernels", "torch"])
@pytest.mark.parametrize("arch", ["llama"])
def test_rslora_and_alpha_scaling_follow_peft(arch, backend, tiny_model_dir, tmp_path):
    """Same weights, three scalings (alpha/r, alpha/sqrt(r), per-module alpha/rank patterns): each equals peft."""
    model = tiny_model_dir(arch)
    plain = make_adapter(model, tmp_path / "plain", r=4, alpha=4, seed=3, scale=2.0)
    rs = make_adapter(model, tmp_path / "rs", r=4, alpha=4, seed=3, scale=2.0)
    edit_config(rs, use_rslora=True)                     # scale 4/sqrt(4) = 2 instead of 4/4 = 1
    patterned = make_adapter(model, tmp_path / "pattern", r=4, alpha=4, seed=4,
                             rank_pattern={"q_proj": 2}, alpha_pattern={"down_proj": 16})
    llm = engine(model, backend)
    outputs = {}
    for name, folder in (("plain", plain), ("rs", rs), ("pattern", patterned)):
        llm.load_adapter(name, folder)
        outputs[name] = [o.token_ids for o in llm.generate(PROMPTS, GREEDY, adapter=name)]
        assert outputs[name] == [reference(str(model), str(folder), tuple(p)) for p in PROMPTS], name
    assert outputs["plain"] != outputs["rs"]

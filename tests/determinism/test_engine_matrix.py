"""Issue 16's matrix on tiny random models of every family, fp32 and bf16: the same requests (a) alone and
cold, (b) after a request sharing their prefix, (c) under token budgets 16, 64 and 512 with the step-time cap
on, (d) batched with 15 others of other lengths and adapters, (e) under a KV budget that forces preemption,
(f) with 1 and 2 threads: identical token ids and bit-identical logits."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "lora"))

from det_helpers import (PREFIX, first_difference, kv_gb_for_blocks, make_llm,  # noqa: E402
                         other_requests, run, target_params, target_prompts)
from lora_helpers import make_adapter  # noqa: E402
from tiny_models import ARCHS  # noqa: E402


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir, tmp_path_factory):
    """Two random LoRA adapters per family (built on first use)."""
    made = {}

    def get(arch):
        if arch not in made:
            root = tmp_path_factory.mktemp(f"adapters-{arch}")
            made[arch] = [make_adapter(tiny_model_dir(arch), root / name, seed=seed, r=4)
                          for name, seed in (("a", 1), ("b", 2))]
        return made[arch]
    return get


def with_adapters(llm, dirs) -> list[str]:
    for name, path in zip("ab", dirs):
        llm.load_adapter(name, path)
    return ["a", "b"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_request_gives_the_same_bits_whatever_the_engine_does(arch, dtype, tiny_model_dir, adapter_dirs):
    folder = tiny_model_dir(arch)
    prompts, params = target_prompts(), target_params()
    adapters = [None, "a", None]    # the middle one runs with an adapter of its own everywhere

    # (a) each alone, cold (no prefix cache): the reference
    llm, rec = make_llm(folder, dtype, enable_prefix_caching=False)
    names = with_adapters(llm, adapter_dirs(arch))
    want = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(prompts, params, adapters)]
    assert len({tuple(w.tokens) for w in want}) > 1

    def check(label, got):
        problem = first_difference(got, want)
        assert problem is None, f"{arch} {dtype}, {label}: {problem}"

    # (b) after a request sharing the prefix: their first blocks come from the prefix cache
    llm, rec = make_llm(folder, dtype)
    with_adapters(llm, adapter_dirs(arch))
    run(llm, rec, [PREFIX + [5, 6, 7]], [params[0]])
    got = [run(llm, rec, [p], [sp], [ad])[0] for p, sp, ad in zip(prompts, params, adapters)]
    check("prefix cache hit", got)
    assert llm.metrics().prefix_cache_hit_rate > 0

    # (c) token budgets 16, 64, 512 with the step-time cap on (a tiny target: chunks follow measured times)
    for budget, target_s in ((16, 0.15), (64, 0.15), (512, 0.0005)):
        llm, rec = make_llm(folder, dtype, max_num_batched_tokens=budget, step_target_s=target_s)
        with_adapters(llm, adapter_dirs(arch))
        check(f"budget {budget}", run(llm, rec, prompts, params, adapters))

    # (d) batched with 15 others of other lengths, temperatures and adapters
    llm, rec = make_llm(folder, dtype)
    names = with_adapters(llm, adapter_dirs(arch))
    o_prompts, o_params, o_adapters = other_requests(15, [None] + names)
    got = run(llm, rec, o_prompts[:7] + prompts + o_prompts[7:], o_params[:7] + params + o_params[7:],
              o_adapters[:7] + adapters + o_adapters[7:])
    check("batched with 15 others", got[7:10])

    # (e) a KV budget that forces preemption (and recompute) while they run with others
    itemsize = 4 if dtype == "float32" else 2
    llm, rec = make_llm(folder, dtype, kv_cache_gb=kv_gb_for_blocks(folder, 14, itemsize=itemsize))
    with_adapters(llm, adapter_dirs(arch))
    got = run(llm, rec, prompts + o_prompts[:4], params + o_params[:4], adapters + o_adapters[:4])
    check("preempted", got[:3])
    assert llm.metrics().num_preemptions > 0

    # (f) one thread
    llm, rec = make_llm(folder, dtype, threads=1)
    with_adapters(llm, adapter_dirs(arch))
    check("1 thread", run(llm, rec, prompts, params, adapters))

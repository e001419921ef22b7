"""The KV disk tier under the prefix cache (engine/kv_disk.py): a new engine (as after a restart) reads the
blocks an earlier one computed instead of computing them, and its replies are bit-identical to cold ones
(tokens and every logits row), chunked and preempted too; another dtype or adapter never reads them; a damaged,
foreign or vanished file is discarded and computed; a folder that cannot be written only turns writing off."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "determinism"))
sys.path.insert(0, str(Path(__file__).parent.parent / "lora"))
from det_helpers import first_difference, kv_gb_for_blocks, make_llm, run  # noqa: E402
from lora_helpers import make_adapter  # noqa: E402

from llmchat.engine.sampling_params import SamplingParams  # noqa: E402

CHAT = list(range(5, 205))                       # 200 tokens: 12 full blocks before its last token
NEXT = CHAT + [41, 42, 43, 44, 45, 46, 47, 48]   # the same chat and one more message


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """The disk tier on, in a folder of this test's own."""
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kv"


def params():
    return [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
            SamplingParams(max_tokens=12, temperature=0.9, seed=7, ignore_eos=True)]


def block_files(disk: Path) -> list[Path]:
    return sorted(disk.glob("*/*.kv"))


def warm_up(folder, dtype="float32", **config):
    """An engine that computes CHAT and writes its blocks, then is gone (its process would end here)."""
    llm, rec = make_llm(folder, dtype, kv_disk=True, **config)
    run(llm, rec, [CHAT], params()[:1])
    assert llm.engine.flush_kv_disk(60)


def test_a_new_engine_reads_the_chat_from_disk_bit_for_bit(tiny_model_dir, disk):
    folder = tiny_model_dir("llama")
    cold, rec = make_llm(folder, "float32", kv_disk=False)
    want = run(cold, rec, [NEXT, NEXT], params())
    warm_up(folder)
    assert len(block_files(disk)) == (len(CHAT) + 12 - 1) // 16    # every full computed block, once
    conditions = [("alone", {}), ("chunked by 16", {"max_num_batched_tokens": 16}),
                  ("preempted", {"kv_cache_gb": kv_gb_for_blocks(folder, 15, itemsize=4)})]
    for label, config in conditions:
        llm, rec = make_llm(folder, "float32", kv_disk=True, **config)
        outs = llm.generate([NEXT, NEXT], params())
        got = [type(w)(o.token_ids, rec.pop(o.request_id, len(o.token_ids))) for w, o in zip(want, outs)]
        assert first_difference(got, want) is None, label
        assert outs[0].metrics.num_disk_cached_tokens == 192, label     # 12 blocks, none computed
        assert outs[0].metrics.num_cached_tokens == 192, label
        assert llm.metrics().prefix_disk_hit_tokens >= 192, label
        if label == "preempted":
            assert llm.metrics().num_preemptions > 0


def test_what_shapes_the_bits_keeps_files_apart(tiny_model_dir, disk, tmp_path):
    folder = tiny_model_dir("llama")
    warm_up(folder)
    written = len(block_files(disk))
    bf16, _ = make_llm(folder, "bfloat16", kv_disk=True)
    assert bf16.generate([NEXT], params()[:1])[0].metrics.num_disk_cached_tokens == 0
    torch_backend, _ = make_llm(folder, "float32", kv_disk=True, attention_backend="torch")
    assert torch_backend.generate([NEXT], params()[:1])[0].metrics.num_disk_cached_tokens == 0
    llm, _ = make_llm(folder, "float32", kv_disk=True)
    llm.load_adapter("a", make_adapter(folder, tmp_path / "a", seed=1, r=4))
    assert llm.generate([NEXT], params()[:1], adapter=["a"])[0].metrics.num_disk_cached_tokens == 0
    for engine in (bf16, torch_backend, llm):
        engine.engine.flush_kv_disk(60)
    assert len({p.parent for p in block_files(disk)}) == 3             # float32 (base and adapter), bf16, torch
    assert len(block_files(disk)) > written


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "another block's file", "deleted"])
def test_a_damaged_or_vanished_file_is_computed_instead(tiny_model_dir, disk, damage, caplog):
    folder = tiny_model_dir("llama")
    cold, rec = make_llm(folder, "float32", kv_disk=False)
    want = run(cold, rec, [NEXT], params()[:1])
    warm_up(folder)
    files = block_files(disk)
    llm, rec = make_llm(folder, "float32", kv_disk=True)      # knows every file from its folder
    victim = _block_holding(files, CHAT[64:80])                  # the fifth block of the chat
    if damage == "flipped byte":
        data = bytearray(victim.read_bytes())
        data[-3] ^= 0x40
        victim.write_bytes(bytes(data))
    elif damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:-100])
    elif damage == "another block's file":
        victim.write_bytes(_block_holding(files, CHAT[:16]).read_bytes())
    else:
        victim.unlink()
    with caplog.at_level(logging.WARNING, logger="llmchat.engine.kv_disk"):
        got = run(llm, rec, [NEXT], params()[:1])
        out_metrics = llm.metrics()
    assert first_difference(got, want) is None
    assert out_metrics.prefix_disk_hit_tokens == 64           # the four blocks before the victim
    if damage != "deleted":
        assert "discarded" in caplog.text
    llm.engine.flush_kv_disk(60)
    assert victim.exists() and victim.read_bytes() != b""     # computed again and written whole


def _block_holding(files: list[Path], tokens: list[int]) -> Path:
    import array
    from llmchat.engine.kv_disk import HEADER
    want = array.array("i", tokens).tobytes()
    return next(p for p in files if p.read_bytes()[HEADER.size:HEADER.size + len(want)] == want)


def test_a_folder_that_cannot_be_written_only_turns_writing_off(tiny_model_dir, disk, caplog):
    folder = tiny_model_dir("llama")
    disk.parent.mkdir(parents=True)
    disk.write_text("a file where the folder should be")        # as a read-only or full disk, for root too
    with caplog.at_level(logging.WARNING, logger="llmchat.engine.kv_disk"):
        llm, rec = make_llm(folder, "float32", kv_disk=True)
        cold, cold_rec = make_llm(folder, "float32", kv_disk=False)
        assert first_difference(run(llm, rec, [NEXT], params()[:1]), run(cold, cold_rec, [NEXT], params()[:1])) is None
    assert caplog.text.count("KV disk cache off") == 1
    assert llm.engine.disk_prefix is None


def test_writing_fails_midway_then_the_engine_goes_on_in_memory(tiny_model_dir, disk, caplog):
    folder = tiny_model_dir("llama")
    llm, rec = make_llm(folder, "float32", kv_disk=True)
    tier = llm.engine.disk_prefix.tier
    tier.folder.rename(tier.folder.with_name("moved"))
    tier.folder.write_text("no longer a folder")
    with caplog.at_level(logging.WARNING, logger="llmchat.engine.kv_disk"):
        first = run(llm, rec, [CHAT], params()[:1])
        assert llm.engine.flush_kv_disk(60)
        again = run(llm, rec, [CHAT], params()[:1])      # from RAM, as always
    assert first_difference(again, first) is None
    assert caplog.text.count("blocks stay in memory only") == 1 and not tier.writable


def test_the_blocks_outlive_the_process(tiny_model_dir, disk):
    """A process that ends right after its reply (no flush of its own) leaves its blocks for the next one."""
    folder = tiny_model_dir("llama")
    script = textwrap.dedent(f"""
        from llmchat.engine import LLM, SamplingParams
        llm = LLM({str(folder)!r}, dtype="float32", kv_cache_gb=0.05, kv_disk=True)
        llm.generate([{CHAT!r}], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    llm, _ = make_llm(folder, "float32", kv_disk=True)
    assert llm.generate([NEXT], params()[:1])[0].metrics.num_disk_cached_tokens == 192


def test_files_beyond_the_budget_are_evicted_oldest_first(tiny_model_dir, disk):
    folder = tiny_model_dir("llama")
    budget = 40 * 1024
    llm, rec = make_llm(folder, "float32", kv_disk=True, kv_disk_gb=budget / 2**30)
    chats = [[(i * 7 + start) % 380 + 3 for i in range(200)] for start in range(8)]   # 8 chats, no block alike
    for chat in chats:
        run(llm, rec, [chat], params()[:1])
        llm.engine.flush_kv_disk(60)
    from llmchat.engine.kv_disk import evict
    evict(disk, llm.engine.disk_prefix.tier.budget)
    files = block_files(disk)
    assert 0 < sum(p.stat().st_size for p in files) <= budget
    newest = _block_holding(files, chats[-1][-16 * 2 - 8:-16 - 8])    # a late block of the last chat stays
    assert newest.exists()

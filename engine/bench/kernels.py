"""Kernel benchmark: paged decode attention as GB/s of KV read next to this machine's memory bandwidth
(measured in the same run), the same work through torch SDPA on gathered K/V, and prefill GFLOP/s.

    python -m llmchat.engine.bench.kernels [--contexts 1024 4096 8192] [--block-size 16] [--blocks-per-group 4] [--json]
    llmchat bench --kernels   (calls main)

The KV pool has the engine's layout: blocks grouped [groups, Hkv, blocks_per_group, block_size, D], each
sequence holding whole groups (its consecutive blocks: what the engine's block manager hands a sequence
while empty groups exist), the groups scattered over the pool in random order. --blocks-per-group 1 gives
every block its own random place.

Every decode run reads K/V blocks that are not in the last-level cache (the pool is rotated), so the
GB/s figure is a DRAM figure. Each figure is the best of several runs (kernel, SDPA and the bandwidth
probe alike): on a shared machine that is the least disturbed run. Compare figures from one run, as ratios.
The share of bandwidth is taken in pairs: a kernel measurement and a read-probe pass back to back, a few
pairs per row, and the median pair is reported. The bandwidth a shared VM gives drifts from one minute
to the next (28-48 GB/s seen here); a pair sees the same moment.

Next to it, a scattered-read probe: the same buffer read as 16 KB runs in random order with the kernel's
software prefetch. Hardware prefetchers carry a contiguous read but barely follow such runs, so this shows
how much of the moment's bandwidth scattered reads get at all. It is not a ceiling: the kernel's reads,
spread between its arithmetic, run 10-20% faster than this plain loop here.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import llmchat.kernels as K
from llmchat.kernels.memory import advise_huge_pages, huge_page_zeros

POOL_MB = 512  # KV pool well above the L3 size, rotated between runs
# A row whose probe read this much more than the run's slowest one was measured in a bandwidth burst (a
# shared VM here has ~20 s windows at nearly twice its usual read bandwidth); the report marks it.
BURST_RATIO = 1.4
SCATTER_RUN_KB = 16  # the scattered-read probe's runs: one head's 64-token piece of K or V at D 128, bf16
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def _best_seconds(fn, reps: int, warm_up: bool = True) -> float:
    if warm_up:
        fn()  # page faults, thread pool start
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class ReadProbe:
    """Sequential read bandwidth over a large fp32 tensor (allocated once): the best of a few timed sums,
    through torch's sum and through the kernels' vector-load sum (read_sum), whichever reads faster."""

    def __init__(self, mbytes: int = POOL_MB):
        # mbytes MiB of fp32 in huge pages like the KV pool (on 4 KiB pages the same sums read ~10-15% slower)
        self.x = huge_page_zeros((mbytes << 18,), torch.float32).fill_(1.0)
        self.readers = {"torch_sum": self.x.sum, "read_sum": lambda: K.read_sum(self.x)}
        for read in self.readers.values():
            read()  # page faults and thread start outside the timing
        # The same buffer as SCATTER_RUN_KB runs in random order, prefetched as the attention kernel prefetches.
        run = SCATTER_RUN_KB << 8
        starts = torch.randperm(self.x.numel() // run, generator=torch.Generator().manual_seed(0)) * run
        self._scattered = lambda: K.read_runs_sum(self.x, starts, run)
        self._scattered_bytes = starts.numel() * run * 4

    def scattered(self, passes: int = 2) -> float:
        """GB/s reading the buffer as scattered runs in random order, software-prefetched."""
        return self._scattered_bytes / _best_seconds(self._scattered, passes) / 1e9

    def gbps(self, reader: str, passes: int) -> float:
        return self.x.numel() * 4 / _best_seconds(self.readers[reader], passes, warm_up=False) / 1e9

    def __call__(self, passes: int = 2) -> float:
        return max(self.gbps(name, passes) for name in self.readers)


def memory_bandwidth(probe: ReadProbe, reps: int = 10) -> dict:
    """Read bandwidth (the faster probe, and each one) and copy bandwidth (read + write of one tensor), GB/s."""
    y = torch.empty_like(probe.x)
    copy = _best_seconds(lambda: y.copy_(probe.x), reps)
    each = {f"{name}_gbps": probe.gbps(name, reps) for name in probe.readers}
    return {"read_gbps": max(each.values()), **each, "copy_gbps": 2 * probe.x.numel() * 4 / copy / 1e9,
            "scattered_gbps": probe.scattered(reps)}


def default_blocks_per_group(block_size: int) -> int:
    """The engine's default (EngineConfig.kv_blocks_per_group): 64 tokens' worth of blocks per group."""
    return max(1, 64 // block_size)


class _Pool:
    """A paged KV cache large enough that consecutive runs touch different (cold) blocks."""

    def __init__(self, ctx: int, batch: int, hkv: int, d: int, bs: int, dtype: torch.dtype, pool_mb: int,
                 per_group: int = 1):
        block_bytes = hkv * bs * d * torch.tensor([], dtype=dtype).element_size()
        groups_per_seq = -(-ctx // (bs * per_group))
        per_run = batch * groups_per_seq * per_group
        self.runs = max(1, (pool_mb << 20) // (2 * block_bytes * per_run))
        num_groups = self.runs * per_run // per_group
        # Allocated untouched, hinted to huge pages, then filled (what an engine's KV cache should do).
        self.key = torch.empty(num_groups, hkv, per_group, bs, d, dtype=dtype)
        self.value = torch.empty_like(self.key)
        self.huge_pages = advise_huge_pages(self.key) and advise_huge_pages(self.value)
        self.key.normal_()
        self.value.normal_()
        # each sequence: whole groups in random places, its blocks consecutive within each group
        first_blocks = torch.randperm(num_groups) * per_group
        ids = (first_blocks[:, None] + torch.arange(per_group)).flatten().to(torch.int32)
        self.tables = ids.view(self.runs, batch, per_run // batch)
        self.next = 0

    def table(self) -> torch.Tensor:
        self.next = (self.next + 1) % self.runs
        return self.tables[self.next]


def _gather(cache: torch.Tensor, table: torch.Tensor, ctx: int) -> torch.Tensor:
    """[groups, Hkv, G, bs, D] or [blocks, Hkv, bs, D] + block ids -> [Hkv, ctx, D] (what a torch-only engine must do)."""
    cache = cache.unsqueeze(2) if cache.dim() == 4 else cache
    table = table.long()
    per_group = cache.shape[2]
    blocks = cache[table // per_group, :, table % per_group]  # [n, Hkv, bs, D]
    return blocks.permute(1, 0, 2, 3).reshape(cache.shape[1], -1, cache.shape[-1])[:, :ctx]


def decode_case(ctx: int, hq: int, hkv: int, d: int, dtype: torch.dtype, bs: int = 16, batch: int = 1,
                reps: int = 20, pool_mb: int = POOL_MB, probe: ReadProbe | None = None, pairs: int = 5,
                per_group: int | None = None) -> dict:
    """Decode attention over a cold paged pool; with a probe, also its share of read bandwidth, as the
    median of `pairs` (kernel, probe) measurements taken back to back."""
    per_group = default_blocks_per_group(bs) if per_group is None else per_group
    pool = _Pool(ctx, batch, hkv, d, bs, dtype, pool_mb, per_group)
    q = torch.randn(batch, hq, d).to(dtype)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32)
    qsl = torch.arange(batch + 1, dtype=torch.int32)
    out = torch.empty_like(q)
    scale = d ** -0.5
    kv_bytes = 2 * batch * ctx * hkv * d * q.element_size()

    def attend():
        K.paged_attention(q, pool.key, pool.value, pool.table(), seq_lens, qsl, scale, out=out)

    for _ in range(pool.runs):  # one pass over the whole pool first: page-table and huge-page settling
        attend()
    kernel, shares, probed = float("inf"), [], []
    for _ in range(pairs if probe else 1):
        seconds = _best_seconds(attend, max(3, reps // 2) if probe else reps)
        kernel = min(kernel, seconds)
        if probe:
            probed.append(probe())
            shares.append(kv_bytes / seconds / 1e9 / probed[-1])
            time.sleep(0.02)  # torch's OpenMP threads spin for a while after the probe; let them park

    def sdpa():
        table = pool.table()
        for s in range(batch):
            k, v = _gather(pool.key, table[s], ctx), _gather(pool.value, table[s], ctx)
            # 4-D [1, H, L, D] inputs: torch's fast SDPA path (3-D inputs with GQA take a much slower one)
            torch.nn.functional.scaled_dot_product_attention(q[s][None, :, None], k[None], v[None], scale=scale,
                                                             enable_gqa=True)

    torch_s = _best_seconds(sdpa, max(3, reps // 4))
    row = {"context": ctx, "batch": batch, "huge_pages": pool.huge_pages, "heads": f"{hq}/{hkv}x{d}",
           "dtype": str(dtype).replace("torch.", ""), "kernel_ms": kernel * 1e3, "kv_gbps": kv_bytes / kernel / 1e9,
           "sdpa_gather_ms": torch_s * 1e3, "speedup_vs_sdpa": torch_s / kernel}
    if probe:
        row.update(read_gbps_nearby=statistics.median(probed), pct_of_read_bw=100 * statistics.median(shares),
                   pct_of_read_bw_pairs=[round(100 * x, 1) for x in shares], scattered_gbps_nearby=probe.scattered())
    return row


def prefill_case(length: int, hq: int, hkv: int, d: int, dtype: torch.dtype, bs: int = 16, reps: int = 3) -> dict:
    nb = (length + bs - 1) // bs
    key = torch.randn(nb, hkv, bs, d).to(dtype)
    value = torch.randn(nb, hkv, bs, d).to(dtype)
    table = torch.arange(nb, dtype=torch.int32)[None]
    q = torch.randn(length, hq, d).to(dtype)
    seq_lens = torch.tensor([length], dtype=torch.int32)
    qsl = torch.tensor([0, length], dtype=torch.int32)
    kernel = _best_seconds(lambda: K.paged_attention(q, key, value, table, seq_lens, qsl, d ** -0.5), reps)
    k, v = _gather(key, table[0], length)[None], _gather(value, table[0], length)[None]
    qt = q.transpose(0, 1)[None]
    torch_s = _best_seconds(lambda: torch.nn.functional.scaled_dot_product_attention(
        qt, k, v, is_causal=True, enable_gqa=True), reps)
    flops = 4 * hq * d * length * (length + 1) / 2  # QK^T and PV over the causal half
    return {"length": length, "heads": f"{hq}/{hkv}x{d}", "dtype": str(dtype).replace("torch.", ""),
            "kernel_ms": kernel * 1e3, "gflops": flops / kernel / 1e9, "sdpa_causal_gflops": flops / torch_s / 1e9}


def run(contexts=(1024, 4096, 8192, 16384), prefill_lengths=(512, 2048), dtype: str = "bf16",
        heads=(32, 8, 128), reps: int = 20, pool_mb: int = POOL_MB, block_size: int = 16,
        blocks_per_group: int | None = None) -> dict:
    """All figures as a dict (what --json prints)."""
    if not K.available():
        raise RuntimeError(f"llmchat kernels are not built: {K.load_error()}")
    dt = DTYPES[dtype]
    hq, hkv, d = heads
    probe = ReadProbe(pool_mb)
    bw = memory_bandwidth(probe)
    per_group = default_blocks_per_group(block_size) if blocks_per_group is None else blocks_per_group
    decode = [decode_case(c, hq, hkv, d, dt, bs=block_size, reps=reps, pool_mb=pool_mb, probe=probe, per_group=per_group)
              for c in contexts]
    one_core = one_core_case(contexts[-1], hq, hkv, d, dt, reps, pool_mb, probe, block_size, per_group)
    mark_bursts(decode, bw["read_gbps"])
    del probe
    prefill = [prefill_case(n, hq, hkv, d, dt, bs=block_size) for n in prefill_lengths]
    return {"isa": K.isa(), "threads": torch.get_num_threads(), "block_size": block_size,
            "blocks_per_group": per_group, "bandwidth": bw,
            "decode": decode, "one_core": one_core, "prefill": prefill}


def mark_bursts(rows: list[dict], run_read_gbps: float) -> None:
    """Flags each row measured while the machine read at least BURST_RATIO x the run's slowest probe."""
    slowest = min([run_read_gbps] + [row["read_gbps_nearby"] for row in rows])
    for row in rows:
        row["in_bandwidth_burst"] = row["read_gbps_nearby"] >= BURST_RATIO * slowest


def one_core_case(ctx: int, hq: int, hkv: int, d: int, dtype: torch.dtype, reps: int, pool_mb: int,
                  probe: ReadProbe, block_size: int = 16, per_group: int | None = None) -> dict:
    """Decode attention and read bandwidth on one thread: how close one core's stream comes to its own limit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return decode_case(ctx, hq, hkv, d, dtype, bs=block_size, reps=reps, pool_mb=pool_mb, probe=probe,
                           per_group=per_group)
    finally:
        torch.set_num_threads(threads)


def format_report(r: dict) -> str:
    bw = r["bandwidth"]
    lines = [f"llmchat kernels: isa={r['isa']} threads={r['threads']} block_size={r['block_size']} "
             f"blocks_per_group={r['blocks_per_group']}",
             f"memory bandwidth: read {bw['read_gbps']:.1f} GB/s (torch sum {bw['torch_sum_gbps']:.1f}, vector-load "
             f"sum {bw['read_sum_gbps']:.1f}; the faster one is the 'read' below), copy {bw['copy_gbps']:.1f} GB/s, "
             f"scattered {bw['scattered_gbps']:.1f} GB/s ({SCATTER_RUN_KB} KB runs at random places, software-prefetched)",
             "decode attention (1 query token, paged KV, cold cache; '% of it': median of 5 kernel/probe pairs "
             "taken back to back):",
             f"  {'context':>7} {'heads':>10} {'dtype':>8} {'ms':>8} {'KV GB/s':>8} {'read GB/s':>9} {'% of it':>7} "
             f"{'SDPA+gather ms':>14} {'speedup':>7} {'scattered GB/s':>14}"]
    for x in r["decode"]:
        lines.append(f"  {x['context']:>7} {x['heads']:>10} {x['dtype']:>8} {x['kernel_ms']:>8.3f} {x['kv_gbps']:>8.1f} "
                     f"{x['read_gbps_nearby']:>9.1f} {x['pct_of_read_bw']:>6.0f}% {x['sdpa_gather_ms']:>14.3f} "
                     f"{x['speedup_vs_sdpa']:>6.1f}x {x['scattered_gbps_nearby']:>14.1f}"
                     f"{' *' if x.get('in_bandwidth_burst') else ''}")
    if any(x.get("in_bandwidth_burst") for x in r["decode"]):
        lines.append(f"  * measured in a bandwidth burst: the probe read >= {BURST_RATIO}x this run's slowest reading")
    x = r["one_core"]
    lines.append(f"  one thread, context {x['context']}: {x['kv_gbps']:.1f} GB/s of KV vs {x['read_gbps_nearby']:.1f} GB/s "
                 f"read on one thread ({x['pct_of_read_bw']:.0f}%), {x['scattered_gbps_nearby']:.1f} GB/s scattered")
    lines.append("prefill attention (causal, one sequence):")
    lines.append(f"  {'length':>7} {'heads':>10} {'dtype':>8} {'ms':>8} {'GFLOP/s':>8} {'SDPA GFLOP/s':>12}")
    for x in r["prefill"]:
        lines.append(f"  {x['length']:>7} {x['heads']:>10} {x['dtype']:>8} {x['kernel_ms']:>8.2f} {x['gflops']:>8.1f} "
                     f"{x['sdpa_causal_gflops']:>12.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmchat.engine.bench.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    p.add_argument("--prefill", type=int, nargs="+", default=[512, 2048], help="prefill lengths")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--heads", type=int, nargs=3, default=[32, 8, 128], metavar=("HQ", "HKV", "D"))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (the engine's block_size)")
    p.add_argument("--blocks-per-group", type=int, default=None,
                   help="KV blocks stored as one run per head (default: the engine's, 64 tokens' worth; 1: none)")
    p.add_argument("--pool-mb", type=int, default=POOL_MB, help="KV pool size (keep it above the L3 size)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if (args.heads[0] % args.heads[1] or args.reps < 1 or args.pool_mb < 1 or args.block_size < 1
            or (args.blocks_per_group is not None and args.blocks_per_group < 1)):
        p.error("HQ must be a multiple of HKV; --reps, --pool-mb, --block-size and --blocks-per-group must be positive")
    try:
        result = run(args.contexts, args.prefill, args.dtype, tuple(args.heads), args.reps, args.pool_mb, args.block_size,
                     args.blocks_per_group)
    except (RuntimeError, ValueError) as exc:
        print(f"llmchat: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

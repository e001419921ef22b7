"""`python -m tools.estimate [--llama-cpp DIR] [--cpu KEY ...]`: cycle tables and projections."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from . import mca
from .cpus import by_key
from .projection import machines
from .report import loop_tables, projection_table, summary_table
from .run import run_all


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.estimate", description=__doc__)
    p.add_argument("--llama-cpp", type=Path, help="a llama.cpp checkout or llama-cpp-python sdist: its loops too")
    p.add_argument("--cpu", action="append", help="estimate only this core (repeatable): " + ", ".join(c.key for c in by_key(None)))
    p.add_argument("--compiler", choices=("clang", "gcc"), default="clang",
                   help="clang (macOS's family; the default) or aarch64-linux-gnu-g++ (what pip uses on Linux)")
    p.add_argument("--only", default="", help="only the table rows containing this text, e.g. 'Q4_0'")
    p.add_argument("--no-projection", action="store_true")
    p.add_argument("--verbose", action="store_true", help="each loop's function, MACs, instructions, cycles per trip")
    args = p.parse_args(argv)

    mca_path, version = mca.llvm_tool("llvm-mca")
    print(f"llvm-mca: {mca_path} (LLVM {version}); compiler: {mca.compiler_command(args.compiler, True)[0]}")
    if version < 16:
        print("warning: this LLVM models Neoverse V1/N2 and Cortex-A76 as a Cortex-A57: install llvm-19")
    cpus = by_key(args.cpu)
    results = run_all(cpus, args.llama_cpp, args.only, compiler=args.compiler)
    print(summary_table(results, cpus))
    print(loop_tables(results, cpus, args.verbose))
    keys = {c.key for c in cpus}
    if not args.no_projection and not args.only and {"neoverse-v1", "apple-m2"} <= keys:
        print(projection_table(results, machines({c.key: c.ghz for c in cpus}), with_llama=args.llama_cpp is not None))
    bad = [r for r in results if r.spec.side == "llmchat" and r.cpu.cpu_flag(args.compiler) and (r.error or not math.isfinite(r.per_mac) or r.per_mac <= 0)]
    for r in bad:
        print(f"error: {r.spec.row} on {r.cpu.key}: {r.error}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Runs every loop on every CPU: compile, find the hot loop, llvm-mca, cycles per multiply-accumulate."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import asm_loop, mca
from .cpus import Cpu
from .loops import LLAMA, OURS, OUR_INCLUDES, OUR_SOURCES, LoopSpec, applies, llama_ggml_dir, llama_source


@dataclass
class Estimate:
    spec: LoopSpec
    cpu: Cpu
    function: str = ""      # where the hot loop was found (a callee of the named function, maybe)
    macs: int = 0           # per trip
    instructions: int = 0
    blocks: int = 0
    cycles: float = 0.0     # simulated, per trip
    rthroughput: float = 0.0
    error: str = ""

    @property
    def per_mac(self) -> float:
        return self.cycles / self.macs if self.macs else float("nan")


def estimate(spec: LoopSpec, cpu: Cpu, ggml: Path | None, compiler: str = "clang") -> Estimate:
    est = Estimate(spec, cpu)
    try:
        flag = cpu.cpu_flag(compiler)
        if flag is None:
            raise LookupError(f"{compiler} does not build for {cpu.key}")
        if spec.side == "llmchat":
            asm = mca.compile_to_asm(OUR_SOURCES / spec.source, flag, OUR_INCLUDES, compiler)
        else:
            source, includes = llama_source(spec, ggml)
            # llama.cpp picks its SVE loops by the vector length at run time (one function holds 128/256/512-bit
            # loops), which the loop finder cannot tell apart: its NEON paths are estimated.
            asm = mca.compile_to_asm(source, flag + ("+nosve" if "neoverse" in flag else ""), includes, compiler)
        loop = asm_loop.hot_loop(asm, spec.function, spec.kind, decode=mca.decode_words, want=spec.want, avoid=spec.avoid)
        est.function, est.macs, est.instructions, est.blocks = loop.function, loop.macs, loop.instructions, loop.blocks
        est.cycles, est.rthroughput = mca.cycles_per_trip(loop.lines, cpu.mca_cpu)
    except (LookupError, RuntimeError, FileNotFoundError) as e:
        est.error = str(e).splitlines()[0]
    return est


def run_all(cpus: list[Cpu], llama_cpp: Path | None, only: str = "", jobs: int = 2, compiler: str = "clang") -> list[Estimate]:
    ggml = llama_ggml_dir(llama_cpp) if llama_cpp else None
    specs = OURS + (LLAMA if ggml else [])
    work = [(s, c) for c in cpus for s in specs if applies(s, c.features) and (not only or only in s.row)]
    # Compile each (file, cpu) once before fanning out, so two threads never build the same file.
    firsts = {}
    for s, c in work:
        firsts.setdefault((s.side, s.source, c.key), (s, c))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda sc: estimate(sc[0], sc[1], ggml, compiler), firsts.values()))
        return list(pool.map(lambda sc: estimate(sc[0], sc[1], ggml, compiler), work))

"""The tools: clang or gcc compiles a loop file to AArch64 assembly for one CPU, llvm-mca times a loop.

The newest llvm-mca on PATH is used: LLVM 14 maps Neoverse V1/N2 and Cortex-A76 to its Cortex-A57 model,
LLVM 19 has real Neoverse V1 and N2 (and N1) models (Debian: `apt install llvm-19`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

MCA_VERSIONS = (19, 18, 17, 16, 15, 14)
# Every extension our loops or llama.cpp's may use, so llvm-mca parses what the compiler emitted even where its
# CPU model predates the feature (the M1 model and bf16).
MCA_ATTRS = "+neon,+dotprod,+fullfp16,+bf16,+i8mm"


@functools.lru_cache(maxsize=None)
def llvm_tool(name: str) -> tuple[str, int]:
    """(path, LLVM major version) of the newest `name` (llvm-mca, llvm-mc) on PATH."""
    for v in MCA_VERSIONS:
        path = shutil.which(f"{name}-{v}")
        if path:
            return path, v
    path = shutil.which(name)
    if path:
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"LLVM version (\d+)", out)
        return path, int(m.group(1)) if m else 0
    raise FileNotFoundError(f"{name} not found: install LLVM (Debian: apt install llvm-19)")


def clang() -> str:
    for name in ("clang++", "clang++-19", "clang++-14"):
        if shutil.which(name):
            return name
    raise FileNotFoundError("clang++ not found (Debian: apt install clang)")


CACHE = Path(tempfile.gettempdir()) / "llmchat-estimate"


def compiler_command(compiler: str, cxx: bool) -> list[str]:
    """clang (macOS's compiler family) or gcc (what `pip install` picks on Linux: setup.py takes c++ / g++)."""
    if compiler == "gcc":
        tool = "aarch64-linux-gnu-g++" if cxx else "aarch64-linux-gnu-gcc"
        if not shutil.which(tool):
            raise FileNotFoundError(f"{tool} not found (Debian: apt install g++-aarch64-linux-gnu)")
        return [tool]
    return [clang() if cxx else clang().replace("++", ""), "--target=aarch64-linux-gnu"]


def compile_to_asm(source: Path, mcpu: str, includes: list[Path], compiler: str = "clang") -> str:
    """The assembly of `source` for -mcpu=mcpu (the flags of the engine's build: -O3, C++17 for .cpp)."""
    cxx = source.suffix in (".cpp", ".cc")
    cmd = [*compiler_command(compiler, cxx), "-O3", f"-mcpu={mcpu}", "-S", *(["-std=c++17"] if cxx else ["-std=c11"]),
           *[f"-I{p}" for p in includes]]
    # the loop sources include kernel .cpp files too: an edit to either must not reuse a stale estimate
    deps = [source, *sorted(p for d in includes for pattern in ("**/*.h", "**/*.cpp") for p in d.glob(pattern))]
    key = hashlib.sha256(" ".join(cmd).encode() + b"".join(p.read_bytes() for p in deps if p.is_file())).hexdigest()[:20]
    out = CACHE / f"{source.stem}-{key}.s"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.stem}.{os.getpid()}.tmp.s")   # two runs at once must not share a temp file
        proc = subprocess.run([*cmd, "-o", str(tmp), str(source)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {source} for {mcpu} failed:\n{proc.stderr[-3000:]}")
        tmp.rename(out)
    return out.read_text()


def decode_words(words: list[str]) -> list[str]:
    """`.inst 0x...` words as assembly text (llvm-mc's disassembler), one line per word."""
    mc, _ = llvm_tool("llvm-mc")
    data = "\n".join(",".join(f"0x{(int(w, 16) >> (8 * i)) & 0xff:02x}" for i in range(4)) for w in words)
    out = subprocess.run([mc, "--disassemble", "-triple=aarch64", f"-mattr={MCA_ATTRS}"], input=data,
                         capture_output=True, text=True, check=True).stdout
    lines = [l.split("//")[0].strip() for l in out.splitlines()]
    lines = [l for l in lines if l and not l.startswith(".")]
    if len(lines) != len(words):
        raise RuntimeError(f"llvm-mc decoded {len(lines)} of {len(words)} .inst words")
    return lines


def cycles_per_trip(lines: list[str], mcpu: str, iterations: int = 300) -> tuple[float, float]:
    """(simulated cycles per trip over `iterations` trips, llvm-mca's block reciprocal throughput)."""
    mca, _ = llvm_tool("llvm-mca")
    proc = subprocess.run([mca, "-mtriple=aarch64", f"-mcpu={mcpu}", f"-mattr={MCA_ATTRS}", f"-iterations={iterations}"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"llvm-mca -mcpu={mcpu} failed:\n{proc.stderr[-2000:]}")
    total = int(re.search(r"Total Cycles:\s+(\d+)", proc.stdout).group(1))
    rthroughput = float(re.search(r"Block RThroughput:\s+([\d.]+)", proc.stdout).group(1))
    return total / iterations, rthroughput

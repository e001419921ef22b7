"""The ARM cores estimated: how clang is told to compile for each and which llvm-mca model stands for it.

Compile flags name every extension the core has (clang 14's -mcpu=neoverse-v1 alone leaves out bf16 and
i8mm, which `-march=native` on the machine would turn on). Where LLVM has no model of the core's own, a close
one stands in, and `model_note` says so.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cpu:
    key: str            # what the tables call it
    product: str
    clang_cpu: str      # -mcpu for clang (with the extensions the core has)
    mca_cpu: str        # -mcpu for llvm-mca: the scheduling model used
    features: frozenset  # "bf16", "i8mm": which of our / llama.cpp's paths the core runs
    ghz: float          # sustained all-core clock, for the projections
    model_note: str = ""

    def cpu_flag(self, compiler: str) -> str | None:
        """-mcpu for `compiler`; None for gcc on Apple cores (macOS builds with clang; gcc 12 knows no apple-m1)."""
        return None if compiler == "gcc" and self.key.startswith("apple") else self.clang_cpu


CPUS = [
    Cpu("neoverse-v1", "AWS Graviton 3", "neoverse-v1+bf16+i8mm", "neoverse-v1", frozenset({"bf16", "i8mm"}), 2.6),
    Cpu("neoverse-n2", "Neoverse N2 (e.g. Azure Cobalt 100)", "neoverse-n2+bf16+i8mm", "neoverse-n2",
        frozenset({"bf16", "i8mm"}), 3.0),
    Cpu("cortex-a76", "Raspberry Pi 5", "cortex-a76", "neoverse-n1", frozenset(), 2.4,
        "LLVM maps cortex-a76 to its Cortex-A57 model; its Neoverse N1 model (the A76's server sibling, the "
        "same pipeline) stands in"),
    Cpu("apple-m1", "Apple M1", "apple-m1", "apple-m1", frozenset(), 3.2,
        "LLVM's only Apple model is Cyclone (2013's A7: 6-wide, 3 FP/SIMD pipes; M1's Firestorm is 8-wide with "
        "4): low confidence"),
    Cpu("apple-m2", "Apple M2", "apple-m1+bf16+i8mm", "apple-m1", frozenset({"bf16", "i8mm"}), 3.49,
        "compiled with M2's bf16 and i8mm, scheduled on the Cyclone model like the M1: low confidence"),
]


def by_key(keys: list[str] | None) -> list[Cpu]:
    if not keys:
        return CPUS
    known = {c.key: c for c in CPUS}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise SystemExit(f"unknown CPU {unknown}; known: {', '.join(known)}")
    return [known[k] for k in keys]

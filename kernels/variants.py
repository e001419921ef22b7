"""Portable builds: the kernels compiled once per CPU level, and the loader takes the best level this CPU runs.

A default install compiles one extension (llmchat.kernels._C) for the CPU doing the install. A portable one
(`LLMCHAT_KERNELS_VARIANTS=portable pip install .`, for a wheel or a shared install) compiles one extension per
level below, llmchat.kernels._C_<name>, and at import the loader asks the CPU probe (llmchat.kernels._cpu,
built for the architecture's baseline so it runs everywhere) which levels this CPU and OS run, and loads the
best. Inside a level, what only some of its CPUs have is chosen at run time too: AMX tiles (CPUID and the OS's
grant, core/amx_linear.cpp) in the AVX-512+BF16 level.

Pure data and no imports beyond the standard library: setup.py reads this file before anything is built.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str                     # module llmchat.kernels._C_<name>
    flags: tuple[str, ...]        # compiler flags of the level
    features: tuple[str, ...]     # what it asks of the CPU, in core/cpu_features.cpp's names (its compiled() list)
    cpus: str                     # who runs it, for people reading the table


# Best first. Each level's flags switch on exactly its features' target macros (tests/kernels/test_variants.py).
X86_64 = (
    Variant("avx512bf16",
            ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16",
             "-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mamx-int8"),
            ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512bf16", "avx512vnni", "avx512vl"),
            "Sapphire Rapids and later (AMX where granted), AMD Zen 4/5"),
    Variant("avx512", ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"),
            ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "avx512vl"),
            "Ice Lake, Cascade Lake"),
    Variant("avx2", ("-mavx2", "-mfma", "-mf16c"), ("avx2", "fma", "f16c"), "Haswell and later, AMD Zen 1-3"),
    Variant("x86_64", (), (), "any x86-64 (scalar kernels)"),
)
AARCH64 = (
    Variant("armv8_6", ("-march=armv8.6-a+bf16+i8mm+dotprod+fp16",), ("fp16", "dotprod", "bf16", "i8mm"),
            "Graviton 3/4, Neoverse V1/V2/N2, Apple M2 and later"),
    Variant("armv8_2", ("-march=armv8.2-a+dotprod+fp16",), ("fp16", "dotprod"),
            "Graviton 2, Ampere Altra, Cortex-A76 (Raspberry Pi 5), Apple M1"),
    Variant("armv8", ("-march=armv8-a",), (), "A64FX, any AArch64 a torch build runs on (PyPI's torch needs Armv8.2)"),
)


def for_machine(machine: str) -> tuple[Variant, ...]:
    """The levels of an architecture (platform.machine()); () where there are none."""
    m = machine.lower()
    if m in ("x86_64", "amd64"):
        return X86_64
    if m in ("aarch64", "arm64"):
        return AARCH64
    return ()


def requested(spec: str, machine: str) -> tuple[Variant, ...]:
    """LLMCHAT_KERNELS_VARIANTS: "portable" (every level of this architecture) or names, comma-separated."""
    levels = for_machine(machine)
    if spec.strip() == "portable":
        if not levels:
            raise ValueError(f"LLMCHAT_KERNELS_VARIANTS=portable: no kernel levels are defined for {machine}")
        return levels
    by_name = {v.name: v for v in levels}
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise ValueError(f"LLMCHAT_KERNELS_VARIANTS={spec!r}: unknown level(s) {', '.join(unknown) or '(none)'}; "
                         f"this {machine} build knows: portable, {', '.join(by_name)}")
    return tuple(v for v in levels if v.name in names)  # best first, whatever order they were named in


def best(levels: tuple[Variant, ...], cpu_has) -> Variant | None:
    """The first level whose every feature cpu_has(name) grants; None when this CPU runs none of them."""
    return next((v for v in levels if all(cpu_has(f) for f in v.features)), None)

"""Portable installs (kernels/variants.py): each CPU level's flags ask the CPU for exactly the features the loader
checks, the CPU probe reports what this CPU has, and real ARM cores (qemu-aarch64 models) each get the best
level they run. The ARM CI job installs two levels and runs the engine on both (.ci/arm/inside)."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from llmchat.kernels import variants

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels" / "csrc"
SOURCES = [str(Path(__file__).with_name("cpu_features_driver.cpp")), str(CSRC / "core" / "cpu_features.cpp")]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
CPUINFO_NAME = {"avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni"}
X86_MACROS = {"avx2": "__AVX2__", "fma": "__FMA__", "f16c": "__F16C__", "avx512f": "__AVX512F__",
              "avx512bw": "__AVX512BW__", "avx512bf16": "__AVX512BF16__", "avx512vnni": "__AVX512VNNI__",
              "avx512vl": "__AVX512VL__", "avxvnni": "__AVXVNNI__"}
X86_HOST = platform.machine() in ("x86_64", "AMD64") and Path("/proc/cpuinfo").exists()


def driver(compiler: list[str], flags: tuple[str, ...], out: Path, runner=(), cpu: str | None = None) -> dict:
    subprocess.run([*compiler, "-std=c++17", "-O2", f"-I{CSRC}", *flags, *SOURCES, "-o", str(out)], check=True,
                   capture_output=True, text=True)
    env = {**os.environ, **({"QEMU_CPU": cpu} if cpu else {})}
    text = subprocess.run([*runner, str(out)], check=True, capture_output=True, text=True, env=env).stdout
    return {k: {f for f in v.split(",") if f} for k, v in (line.split("=", 1) for line in text.splitlines())}


def x86_cpuinfo() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split())


@pytest.mark.parametrize("compiler", [["aarch64-linux-gnu-g++"], ["clang++", "--target=aarch64-linux-gnu"]])
@pytest.mark.parametrize("level", variants.AARCH64, ids=lambda v: v.name)
def test_each_arm_level_asks_for_exactly_its_features(tmp_path, level, compiler):
    got = driver(compiler, level.flags, tmp_path / "features", runner=QEMU, cpu="max")
    assert got["compiled"] == set(level.features)
    assert got["missing"] == set()  # qemu's max core runs every level


@pytest.mark.skipif(not X86_HOST, reason="x86-64 Linux host")
@pytest.mark.parametrize("level", variants.X86_64, ids=lambda v: v.name)
def test_each_x86_level_asks_for_exactly_its_features(tmp_path, level):
    if all(CPUINFO_NAME.get(f, f) in x86_cpuinfo() for f in level.features):
        got = driver(["g++"], level.flags, tmp_path / "features")
        assert got["compiled"] == set(level.features)
        assert got["missing"] == set()
    else:  # this host cannot run the level's driver: read the target macros cpu_features.cpp turns into names
        macros = subprocess.run(["g++", "-dM", "-E", "-x", "c++", "-", *level.flags], input="", check=True,
                                capture_output=True, text=True).stdout.split()
        assert {f for f, m in X86_MACROS.items() if m in macros} == set(level.features)


@pytest.mark.skipif(not X86_HOST, reason="x86-64 Linux host")
def test_the_probe_reports_this_x86_cpus_features():
    from llmchat.kernels import _cpu

    have = x86_cpuinfo()
    for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512bf16", "avx512vnni", "avx512vl", "avxvnni"):
        assert _cpu.has(f) == (CPUINFO_NAME.get(f, f) in have), f
    assert _cpu.has("no-such-feature") is False
    with pytest.raises(TypeError):
        _cpu.has(3)
    best = variants.best(variants.X86_64, _cpu.has)
    assert best is not None and all(CPUINFO_NAME.get(f, f) in have for f in best.features)


@pytest.mark.parametrize("cpu, level", [
    ("max", "armv8_6"),          # Armv8.6 with bf16 and i8mm: Graviton 3/4, Apple M2+
    ("neoverse-n1", "armv8_2"),  # Graviton 2, Ampere Altra: dotprod and fp16, no bf16
    ("cortex-a76", "armv8_2"),   # Raspberry Pi 5
    ("cortex-a72", "armv8"),     # Raspberry Pi 4: Armv8.0
    ("cortex-a53", "armv8"),
    ("a64fx", "armv8"),          # Fugaku: Armv8.2 with fp16, no dotprod
])
def test_each_arm_core_gets_the_best_level_it_runs(tmp_path, cpu, level):
    # the probe's own code (cpu_features.cpp) built for the baseline, on each emulated core
    has = driver(["aarch64-linux-gnu-g++"], ("-march=armv8-a",), tmp_path / "probe", runner=QEMU, cpu=cpu)["has"]
    assert variants.best(variants.AARCH64, has.__contains__).name == level
    # a portable install of the two upper levels only (the ARM CI job's): the cores below run neither
    upper = variants.requested("armv8_6,armv8_2", "aarch64")
    assert (variants.best(upper, has.__contains__) is None) == (level == "armv8")


def test_the_levels_named_at_install():
    assert variants.requested("portable", "x86_64") == variants.X86_64
    assert variants.requested(" armv8 , armv8_6", "aarch64") == (variants.AARCH64[0], variants.AARCH64[2])  # best first
    with pytest.raises(ValueError, match="unknown level.*avx9.*knows: portable, avx512bf16"):
        variants.requested("avx2,avx9", "x86_64")
    with pytest.raises(ValueError, match="no kernel levels"):
        variants.requested("portable", "riscv64")
    with pytest.raises(ValueError, match="unknown level"):
        variants.requested(",", "aarch64")

"""A build made for a wider CPU says what this CPU lacks instead of dying on an illegal instruction: the
runtime checks (CPUID + XGETBV on x86, getauxval HWCAP/HWCAP2 on Linux AArch64) against the compiler's
target macros. The ARM builds run under qemu-aarch64 with QEMU_CPU set to real cores without bf16/i8mm."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

import llmchat.kernels as K

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels" / "csrc"
SOURCES = [str(Path(__file__).with_name("cpu_features_driver.cpp")), str(CSRC / "core" / "cpu_features.cpp")]
ARM_FLAGS = ["-march=armv8.6-a+bf16+i8mm+dotprod+fp16"]
ARM_ALL = ["fp16", "dotprod", "bf16", "i8mm"]
CPUINFO_NAME = {"avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni"}   # /proc/cpuinfo spellings


def run_driver(compiler: str, flags: list[str], out: Path, env: dict | None = None, runner=()) -> dict[str, list[str]]:
    subprocess.run([compiler, "-std=c++17", "-O2", f"-I{CSRC}", *flags, *SOURCES, "-o", str(out)], check=True,
                   capture_output=True, text=True)
    text = subprocess.run([*runner, str(out)], check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout
    fields = dict(line.split("=", 1) for line in text.splitlines())
    return {k: [f for f in v.split(",") if f] for k, v in fields.items()}


def x86_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split())


def test_the_loaded_extension_runs_on_this_cpu():
    assert K.available(), K.load_error()
    compiled = torch.ops.llmchat.compiled_cpu_features()
    assert torch.ops.llmchat.missing_cpu_features() == ""
    if K.isa().startswith("avx"):
        assert {"avx2", "fma", "f16c"} <= set(compiled.split(","))


@pytest.mark.parametrize("cpu, missing", [
    ("max", []),                                    # qemu's everything: Armv8.6 with bf16 and i8mm
    ("neoverse-n1", ["bf16", "i8mm"]),              # Graviton 2, Ampere Altra: dotprod and fp16, no bf16
    ("cortex-a76", ["bf16", "i8mm"]),               # Raspberry Pi 5
    ("cortex-a72", ARM_ALL),                        # Raspberry Pi 4: Armv8.0
])
@pytest.mark.parametrize("compiler", ["aarch64-linux-gnu-g++", "clang++"])
def test_an_armv8_6_build_names_what_each_core_lacks(tmp_path, cpu, missing, compiler):
    flags = ARM_FLAGS if compiler.startswith("aarch64") else ["--target=aarch64-linux-gnu", *ARM_FLAGS]
    got = run_driver(compiler, flags, tmp_path / "cpu_features", env={"QEMU_CPU": cpu},
                     runner=["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
    assert got["compiled"] == ARM_ALL
    assert got["missing"] == missing


def test_a_baseline_arm_build_asks_for_nothing(tmp_path):
    got = run_driver("aarch64-linux-gnu-g++", ["-march=armv8-a"], tmp_path / "cpu_features",
                     env={"QEMU_CPU": "cortex-a72"}, runner=["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
    assert got["compiled"] == [] and got["missing"] == []


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or os.uname().machine != "x86_64", reason="x86-64 Linux host")
def test_an_avx512_build_names_what_this_x86_cpu_lacks(tmp_path):
    flags = ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512bf16", "-mavx512vnni", "-mavxvnni"]
    got = run_driver("g++", flags, tmp_path / "cpu_features")
    assert got["compiled"] == ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512bf16", "avx512vnni", "avxvnni"]
    have = x86_flags()
    assert got["missing"] == [f for f in got["compiled"] if CPUINFO_NAME.get(f, f) not in have]

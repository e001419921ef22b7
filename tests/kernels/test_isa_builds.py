"""Every ISA header, proven on this x86-64 machine: the torch-free core + core_driver.cpp is compiled for
AVX-512(+BF16), AVX2, scalar, and cross-compiled for AArch64 NEON(+BF16) (with gcc, and with clang like
macOS) and run under qemu-aarch64.
The driver checks each kernel against the scalar reference. A missing toolchain is a failure, not a skip:
CI installs g++, g++-aarch64-linux-gnu, clang and qemu-user (Debian/Ubuntu packages).
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import llmchat.kernels as K

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels" / "csrc"
CORE = ["attention.cpp", "amx_linear.cpp", "norm.cpp", "rotary.cpp", "elementwise.cpp"]  # what core_driver.cpp checks (+ the AMX grant)
SOURCES = [str(Path(__file__).with_name("core_driver.cpp")), *(str(CSRC / "core" / name) for name in CORE)]
COMMON = ["-std=c++17", "-O2", "-Wno-maybe-uninitialized", f"-I{CSRC}"]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]

# name: (compiler, flags, runner prefix, isa string the driver must report)
VARIANTS = {
    "native": ("g++", ["-march=native"], [], None),  # must report the same path as the built extension
    "avx512": ("g++", ["-mavx512f", "-mavx512bw", "-mavx2", "-mfma", "-mf16c"], [], "avx512"),
    "avx2": ("g++", ["-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    "scalar": ("g++", ["-DLLMCHAT_FORCE_SCALAR"], [], "scalar"),
    "neon+bf16": ("aarch64-linux-gnu-g++", ["-march=armv8.6-a+bf16"], QEMU, "neon+bf16"),
    "neon": ("aarch64-linux-gnu-g++", ["-march=armv8-a"], QEMU, "neon"),
    # clang is the compiler family of macOS (Apple silicon builds with Apple clang): the arm64 path must
    # compile and pass with it too, not only with gcc
    "neon+bf16 (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8.6-a+bf16"], QEMU, "neon+bf16"),
    # no BFDOT (Cortex-A76, Neoverse N1, Apple M1): bf16 through the widened fallback, with both compilers
    "neon (clang)": ("clang++", ["--target=aarch64-linux-gnu", "-march=armv8-a"], QEMU, "neon"),
    # bf16 attention on AMX tiles (core/attention_amx.h): on an emulation of the tiles anywhere on x86, and on
    # the real ones where the host has them
    "amx (emulated)": ("g++", ["-DLLMCHAT_EMULATE_AMX", "-mavx2", "-mfma", "-mf16c"], [], "avx2"),
    "amx": ("g++", ["-march=sapphirerapids"], [], "avx512+bf16"),
}
# the attention path each variant must report (the rest: "vector"; native: what this CPU grants); ARM with bf16
# runs every bf16 row on BFMMLA tiles (core/attention_bfmmla.h), plain NEON keeps the vector path
ATTENTION = {"amx (emulated)": "amx", "amx": "amx", "neon+bf16": "bfmmla", "neon+bf16 (clang)": "bfmmla",
             "neon": "vector", "neon (clang)": "vector"}
# x86 variant: the /proc/cpuinfo flag it needs (the AMX ones are test_linear_isa_builds.py's)
NATIVE_X86 = {"avx512": "avx512bw", "avx2": "avx2", "scalar": "", "amx (emulated)": "avx2", "amx": "amx_bf16",
              "amx (emulated, asan)": "avx2", "avx512+vnni": "avx512_vnni", "avx-vnni": "avx_vnni", "tiles vnni": "avx512_vnni",
              "tiles amx (emulated)": "avx512_vnni"}
TOOLS = {"g++": "g++", "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64": "qemu-user", "clang++": "clang"}


def host_runs(name: str) -> bool:
    """The x86 variants need an x86 host with that ISA; the aarch64 ones always run under qemu."""
    if name not in NATIVE_X86:
        return True  # native runs anywhere; aarch64 variants run under qemu
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return NATIVE_X86[name] == "" or NATIVE_X86[name] in flags.split()


def build_and_run(name: str, out_dir: Path, sources: list[str], variants: dict | None = None) -> subprocess.CompletedProcess:
    compiler, flags, runner, _ = (variants or VARIANTS)[name]
    exe = out_dir / re.sub(r"\W+", "_", name)
    built = subprocess.run([compiler, *COMMON, *flags, *sources, "-o", str(exe)], capture_output=True, text=True)
    if built.returncode != 0:
        return built
    return subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=600)


def build_all_variants(out_dir: Path, sources: list[str], variants: dict | None = None) -> dict[str, subprocess.CompletedProcess]:
    """Build and run `sources` for every variant (default: VARIANTS) this host can execute; a missing
    toolchain fails."""
    variants = variants or VARIANTS
    missing = [f"{tool} (apt package {pkg})" for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    assert not missing, "toolchain missing for the ISA tests: " + ", ".join(missing)
    names = [n for n in variants if host_runs(n)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two compilers at a time: the machine is shared
        return dict(zip(names, pool.map(lambda n: build_and_run(n, out_dir, sources, variants), names)))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return build_all_variants(tmp_path_factory.mktemp("isa-builds"), SOURCES)


def assert_variant_passed(results: dict, name: str, variants: dict | None = None, native_isa=K.isa) -> None:
    """The driver built for variant `name` ran on its ISA path and every check passed; the native variant
    must report native_isa(), the path of the built extension."""
    if name not in results:
        pytest.skip(f"{name} cannot execute on a {platform.machine()} host")  # never the case on x86-64 CI
    proc = results[name]
    assert proc.returncode == 0, f"{name} build or run failed:\n{proc.stdout}\n{proc.stderr}"
    want = (variants or VARIANTS)[name][3] or native_isa()
    assert f"isa={want}\n" in proc.stdout
    assert "ok " in proc.stdout and ", 0 failed" in proc.stdout


@pytest.mark.parametrize("name", list(VARIANTS))
def test_isa_path_matches_scalar_reference(results, name):
    assert_variant_passed(results, name)
    if name == "native":
        x86_amx = platform.machine() in ("x86_64", "AMD64") and "amx_bf16" in Path("/proc/cpuinfo").read_text().split()
        arm_bf16 = "isa=neon+bf16\n" in results[name].stdout  # an ARM host with bf16 (the ARM job)
        want = "amx" if x86_amx else "bfmmla" if arm_bf16 else "vector"
    else:
        want = ATTENTION.get(name, "vector")
    assert f"attention={want}\n" in results[name].stdout


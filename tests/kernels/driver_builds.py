"""Builds and runs of the standalone C++ drivers (tests/kernels/*_driver.cpp) for the *_builds.py modules.

Each (compiler, flags, source) is compiled to an object once per session (a flag that defines a macro the source
never reads does not count: object_key) and every driver that has that source links the same object: the drivers
share most core sources (kernels/csrc/core) and their variants share flags, so a session compiled each core source
for each variant several times over before. Linking separately compiled objects is what a one-line
`g++ flags sources -o exe` does too. Two jobs run at a time (the machine is shared); the emulated (qemu) runs, the
longest, start first. A missing toolchain is a failure, never a skip.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels" / "csrc"
COMMON = ["-std=c++17", "-O2", "-Wno-maybe-uninitialized", f"-I{CSRC}"]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
TOOLS = {"g++": "g++", "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64": "qemu-user", "clang++": "clang"}
# x86 variant: the /proc/cpuinfo flag it needs to run ("": none); the rest (native, aarch64 under qemu) run anywhere
NATIVE_X86 = {"avx512": "avx512bw", "avx2": "avx2", "scalar": "", "amx (emulated)": "avx2", "amx": "amx_bf16",
              "amx (emulated, asan)": "avx2", "avx512+vnni": "avx512_vnni", "avx-vnni": "avx_vnni", "tiles vnni": "avx512_vnni",
              "tiles amx (emulated)": "avx512_vnni"}

_objects: dict[tuple, Future] = {}  # (object dir, compiler, flags, source) -> Future[(object path, failed compile)]
_lock = threading.Lock()


def host_runs(name: str) -> bool:
    """The x86 variants need an x86 host with that ISA; the aarch64 ones always run under qemu."""
    if name not in NATIVE_X86:
        return True
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return NATIVE_X86[name] == "" or NATIVE_X86[name] in flags.split()


def object_key(compiler: str, flags: list[str], source: str) -> tuple:
    """What the object of `source` depends on: the compiler, its flags but the macro definitions (-D), and the source
    as preprocessed with every flag. Variants whose -D the source never reads (LLMCHAT_EMULATE_AMX in quant_linear.cpp,
    norm.cpp, the drivers but lora_driver.cpp) compile the same text with the same options, so they share one object;
    a -D that changes the text makes another. Preprocessing costs a tenth of a second, a compile up to a minute."""
    pre = subprocess.run([compiler, *COMMON, *flags, "-E", source], capture_output=True)
    text = pre.stdout if pre.returncode == 0 else repr(flags).encode()  # the compile then fails and says why
    return compiler, tuple(f for f in flags if not f.startswith("-D")), source, hashlib.sha256(text).hexdigest()


def compile_object(obj_dir: Path, compiler: str, flags: list[str], source: str) -> tuple[Path, subprocess.CompletedProcess | None]:
    """The object of `source` built with compiler and COMMON + flags, compiled by the first caller of the session
    with the same object_key (others wait for it); the second item is the failed compile, if it failed."""
    key = (str(obj_dir), *object_key(compiler, flags, source))
    with _lock:
        future, mine = _objects.get(key), False
        if future is None:
            future, mine = Future(), True
            _objects[key] = future
    if mine:  # a future is only ever made by the thread that fills it: a waiter never waits on a queued job
        digest = hashlib.sha1(repr(key[1:]).encode()).hexdigest()[:12]
        obj = obj_dir / f"{Path(source).stem}-{digest}.o"
        try:
            built = subprocess.run([compiler, *COMMON, *flags, "-c", source, "-o", str(obj)], capture_output=True, text=True)
            future.set_result((obj, built if built.returncode != 0 else None))
        except BaseException as exc:
            future.set_exception(exc)
    return future.result()


def build_and_run(name: str, out_dir: Path, sources: list[str], variants: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    """Compile (or reuse) every source's object for variant `name`, link them and run the driver."""
    compiler, flags, runner, _ = variants[name]
    obj_dir = out_dir.parent / "driver-objects"  # tmp_path_factory's base: one per session
    obj_dir.mkdir(exist_ok=True)
    objects = []
    for source in sources:
        obj, failed = compile_object(obj_dir, compiler, flags, source)
        if failed is not None:
            return failed
        objects.append(str(obj))
    exe = out_dir / re.sub(r"\W+", "_", name)
    linked = subprocess.run([compiler, *COMMON, *flags, *objects, "-o", str(exe)], capture_output=True, text=True)
    if linked.returncode != 0:
        return linked
    return subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def build_all_variants(out_dir: Path, sources: list[str], variants: dict, env: dict | None = None) -> dict[str, subprocess.CompletedProcess]:
    """Build and run `sources` for every variant this host can execute (emulated ones first: they take longest);
    a missing toolchain fails."""
    missing = [f"{tool} (apt package {pkg})" for tool, pkg in TOOLS.items() if shutil.which(tool) is None]
    assert not missing, "toolchain missing for the ISA tests: " + ", ".join(missing)
    names = sorted((n for n in variants if host_runs(n)), key=lambda n: not variants[n][2])
    with ThreadPoolExecutor(max_workers=2) as pool:  # two jobs at a time: the machine is shared
        futures = {n: pool.submit(build_and_run, n, out_dir, sources, variants, env) for n in names}
        return {n: futures[n].result() for n in variants if n in futures}


def assert_variant_passed(results: dict, name: str, variants: dict, native_isa=None) -> None:
    """The driver built for variant `name` ran on its ISA path and every check passed; the native variant
    must report native_isa() (default: the built extension's isa())."""
    if name not in results:
        pytest.skip(f"{name} cannot execute on a {platform.machine()} host")  # never the case on x86-64 CI
    proc = results[name]
    assert proc.returncode == 0, f"{name} build or run failed:\n{proc.stdout}\n{proc.stderr}"
    if native_isa is None:
        import llmchat.kernels as K
        native_isa = K.isa
    want = variants[name][3] or native_isa()
    assert f"isa={want}\n" in proc.stdout
    assert "ok " in proc.stdout and ", 0 failed" in proc.stdout

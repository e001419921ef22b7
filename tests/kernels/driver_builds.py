"""Builds and runs of the standalone C++ drivers (tests/kernels/*_driver.cpp) for the *_builds.py modules.

Each (compiler, flags, source) is compiled to an object once per session (a flag that defines a macro the source
never reads does not count: object_key) and every driver that has that source links the same object: the drivers
share most core sources (kernels/csrc/core) and their variants share flags, so a session compiled each core source
for each variant several times over before. Linking separately compiled objects is what a one-line
`g++ flags sources -o exe` does too. Two jobs run at a time (the machine is shared); the emulated (qemu) runs, the
longest, start first. A missing toolchain is a failure, never a skip.

The objects also outlive the session, like ccache: they are kept in object_cache_dir() ($LLMCHAT_TEST_OBJECT_CACHE,
default $XDG_CACHE_HOME/llmchat/test-objects or ~/.cache/llmchat/test-objects), named by a digest of the compiler
(its resolved path, its --version and what the driver makes of the flags: -march=native as the CPU it found), the
flags but -D, and the preprocessed text, so a second run compiles only what changed (a changed header changes the
text). Compiles run in the repository root with paths relative to it, so the text, and the object, are the same in
every clone. Each object is written under a temporary name and renamed (two workers or two runs never see half an
object), under a lock per object (one compiles, the other waits and takes it); the folder is kept under
CACHE_MAX_BYTES by dropping the least recently used objects, and falls back to the session's tmp folder when it
cannot be written. Links and runs are never cached: every test links and runs its driver.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kernels" / "csrc"
COMMON = ["-std=c++17", "-O2", "-Wno-maybe-uninitialized", f"-I{CSRC}"]  # the assembly checks: optimized as a build is
# The drivers prove each path's arithmetic, not its speed: -O1 compiles their objects in about half the CPU time of
# -O2 (all of them on a Zen 5: 272 s against 494 s) and runs them about as fast under qemu. Their bits cannot depend on
# the level: every kernel source includes core/exact_float.h (no multiply-add fused into an FMA at any level, gcc
# or clang), the rest is intrinsics and IEEE operations, and every digest compared across builds comes from this
# level. -fstrict-aliasing keeps -O2's aliasing rule in force (clang has it at every level), so code that breaks
# it still fails here.
DRIVER = ["-std=c++17", "-O1", "-fstrict-aliasing", "-Wno-maybe-uninitialized", f"-I{CSRC}"]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
TOOLS = {"g++": "g++", "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64": "qemu-user", "clang++": "clang"}
# x86 variant: the /proc/cpuinfo flag it needs to run ("": none); the rest (native, aarch64 under qemu) run anywhere
NATIVE_X86 = {"avx512": "avx512bw", "avx2": "avx2", "scalar": "", "amx (emulated)": "avx2", "amx": "amx_bf16",
              "amx (emulated, asan)": "avx2", "avx512+vnni": "avx512_vnni", "avx-vnni": "avx_vnni", "tiles vnni": "avx512_vnni",
              "tiles amx (emulated)": "avx512_vnni"}

CACHE_MAX_BYTES = 2 << 30  # the object cache's bound: least recently used objects beyond it are dropped
CACHE_KEEP_SECONDS = 3600  # never dropped when used this recently (a running session may still link it)

_objects: dict[tuple, Future] = {}  # (object folder, object name) -> Future[(object path, failed compile)]
_compilers: dict[str, str] = {}  # resolved compiler path -> its --version output
_targets: dict[tuple, str] = {}  # (resolved compiler, flags but -D) -> what the driver makes of them (-###)
_cache_dirs: dict[str, Path | None] = {}  # cache folder -> itself when writable (checked once per process), else None
_lock = threading.Lock()


def host_runs(name: str) -> bool:
    """The x86 variants need an x86 host with that ISA; the aarch64 ones always run under qemu."""
    if name not in NATIVE_X86:
        return True
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return NATIVE_X86[name] == "" or NATIVE_X86[name] in flags.split()


def _portable(args: list[str]) -> list[str]:
    """args with the paths inside the repository made relative to it (compiles run there): the preprocessed text's
    line markers and __FILE__ are then the same in every clone, and so are the key and the object."""
    def rel(path: str) -> str | None:
        p = Path(path)
        if not p.is_absolute() or not p.resolve().is_relative_to(ROOT):
            return None
        return os.path.relpath(p.resolve(), ROOT)
    out = []
    for a in args:
        if a.startswith("-I") and rel(a[2:]) is not None:
            out.append("-I" + rel(a[2:]))
        else:
            out.append(rel(a) or a)
    return out


def compiler_identity(compiler: str, flags: list[str]) -> tuple[str, str, str]:
    """The compiler's resolved path, its --version output (read once per compiler per process) and its driver's
    expansion of the flags but -D (`-###`, run in / so no folder shows): -march=native there is the CPU it found."""
    found = shutil.which(compiler)
    path = os.path.realpath(found) if found else compiler
    nodefs = tuple(f for f in _portable([*DRIVER, *flags]) if not f.startswith("-D"))
    with _lock:
        version, target = _compilers.get(path), _targets.get((path, nodefs))
    if version is None:
        v = subprocess.run([compiler, "--version"], capture_output=True, text=True)
        version = v.stdout + v.stderr
        with _lock:
            _compilers[path] = version
    if target is None:
        t = subprocess.run([compiler, *nodefs, "-###", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True, cwd="/")
        target = t.stdout + t.stderr
        with _lock:
            _targets[(path, nodefs)] = target
    return path, version, target


def object_key(compiler: str, flags: list[str], source: str) -> tuple:
    """What the object of `source` depends on: the compiler (compiler_identity), the options but the macro
    definitions (-D), and the source as preprocessed with every flag. Variants whose -D the source never reads
    (LLMCHAT_EMULATE_AMX in quant_linear.cpp, norm.cpp, the drivers but lora_driver.cpp) compile the same text with the
    same options, so they share one object; a -D that changes the text, or a changed header, makes another.
    Preprocessing costs a tenth of a second, a compile up to a minute."""
    args = _portable([*DRIVER, *flags, source])
    pre = subprocess.run([compiler, *args[:-1], "-E", args[-1]], capture_output=True, cwd=ROOT)
    # not preprocessed: the compile then fails and says why, and is never cached
    text = hashlib.sha256(pre.stdout).hexdigest() if pre.returncode == 0 else f"not preprocessed: {source} {flags!r}"
    return (*compiler_identity(compiler, flags), tuple(f for f in args[:-1] if not f.startswith("-D")), text)


def object_cache_dir() -> Path:
    """Where compiled objects are kept across runs: $LLMCHAT_TEST_OBJECT_CACHE, else llmchat/test-objects in
    $XDG_CACHE_HOME or ~/.cache."""
    if os.environ.get("LLMCHAT_TEST_OBJECT_CACHE"):
        return Path(os.environ["LLMCHAT_TEST_OBJECT_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmchat" / "test-objects"


def _usable_cache_dir() -> Path | None:
    """object_cache_dir() if this process can write there (once per process and folder: then the least recently
    used objects beyond CACHE_MAX_BYTES are dropped), else None."""
    folder = object_cache_dir()
    with _lock:
        if str(folder) in _cache_dirs:
            return _cache_dirs[str(folder)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".tmp-probe-")
        os.close(fd)
        os.unlink(probe)
        evict_objects(folder)
        usable = folder
    except OSError:
        usable = None
    with _lock:
        _cache_dirs[str(folder)] = usable
    return usable


class _ObjectLock:
    """An exclusive lock on one object's name (flock of <name>.lock), across threads, processes and runs."""

    def __init__(self, obj: Path, wait: bool = True):
        self.path, self.wait, self.fd = obj.with_suffix(".lock"), wait, None

    def __enter__(self) -> bool:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # releases the lock


def evict_objects(folder: Path, max_bytes: int | None = None, keep_seconds: float | None = None) -> list[Path]:
    """Drop the least recently used objects (oldest mtime: each use touches its object) until the folder holds at
    most max_bytes, never one used in the last keep_seconds nor one whose lock is held; temporaries older than that
    are left-overs of a killed compile and go too. Returns what was dropped."""
    max_bytes = CACHE_MAX_BYTES if max_bytes is None else max_bytes
    keep_seconds = CACHE_KEEP_SECONDS if keep_seconds is None else keep_seconds
    cutoff = time.time() - keep_seconds
    objects, total, dropped = [], 0, []
    for entry in os.scandir(folder):
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        if entry.name.startswith(".tmp-"):
            if st.st_mtime < cutoff:
                Path(entry.path).unlink(missing_ok=True)
        elif entry.name.endswith(".o"):
            objects.append((st.st_mtime, st.st_size, Path(entry.path)))
            total += st.st_size
    for mtime, size, obj in sorted(objects):
        if total <= max_bytes or mtime >= cutoff:
            break
        with _ObjectLock(obj, wait=False) as locked:
            try:
                if not locked or obj.stat().st_mtime >= cutoff:  # in use, or used since the scan
                    continue
                obj.unlink()
            except FileNotFoundError:
                pass
            obj.with_suffix(".lock").unlink(missing_ok=True)
        total -= size
        dropped.append(obj)
    return dropped


def _log(event: str, obj: Path) -> None:
    """One line per object taken from the cache or compiled, appended to $LLMCHAT_TEST_OBJECT_LOG if set (.ci/run
    counts them)."""
    log = os.environ.get("LLMCHAT_TEST_OBJECT_LOG")
    if log:
        try:
            with open(log, "a") as f:
                f.write(f"{event} {obj.name}\n")
        except OSError:
            pass


def _fetch_or_compile(folder: Path, name: str, compiler: str, flags: list[str], source: str,
                      shared: bool) -> tuple[Path, subprocess.CompletedProcess | None]:
    """The object `name` in `folder`: taken as it is if there (touched: used now), else compiled to a temporary name
    and renamed. `shared`: the persistent cache, where a lock per name makes one process compile and others wait."""
    obj = folder / name
    with _ObjectLock(obj) if shared else _NoLock():
        if shared:
            try:
                os.utime(obj)
                _log("reused", obj)
                return obj, None
            except FileNotFoundError:
                pass
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".o")
        os.close(fd)
        try:
            args = _portable([*DRIVER, *flags, source])
            built = subprocess.run([compiler, *args[:-1], "-c", args[-1], "-o", tmp], capture_output=True, text=True, cwd=ROOT)
            if built.returncode != 0:
                return obj, built
            os.replace(tmp, obj)
        finally:
            Path(tmp).unlink(missing_ok=True)
        if shared:
            _log("compiled", obj)
        return obj, None


class _NoLock:
    def __enter__(self):
        return True

    def __exit__(self, *exc):
        return None


def compile_object(obj_dir: Path, compiler: str, flags: list[str], source: str) -> tuple[Path, subprocess.CompletedProcess | None]:
    """The object of `source` built with compiler and DRIVER + flags: from the object cache (object_cache_dir(), or
    obj_dir, the session's folder, when the cache cannot be written) if an earlier run or process made it, else
    compiled by the first caller of the session with the same object_key (others wait for it); the second item is
    the failed compile, if it failed (never cached)."""
    key = object_key(compiler, flags, source)
    name = f"{Path(source).stem}-{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}.o"
    cache = None if key[-1].startswith("not preprocessed") else _usable_cache_dir()
    folder = cache or obj_dir
    with _lock:
        future, mine = _objects.get((str(folder), name)), False
        if future is None:
            future, mine = Future(), True
            _objects[(str(folder), name)] = future
    if mine:  # a future is only ever made by the thread that fills it: a waiter never waits on a queued job
        try:
            try:
                future.set_result(_fetch_or_compile(folder, name, compiler, flags, source, shared=cache is not None))
            except OSError:
                if cache is None:
                    raise
                obj_dir.mkdir(exist_ok=True)  # the cache failed mid-way (full, removed): the session's folder
                future.set_result(_fetch_or_compile(obj_dir, name, compiler, flags, source, shared=False))
        except BaseException as exc:
            future.set_exception(exc)
    obj, failed = future.result()
    if failed is None and cache is not None:
        try:
            os.utime(obj)  # used now (an object shared in memory too), so no eviction takes it before the link
        except FileNotFoundError:  # dropped since (another process's eviction): made again
            with _lock:
                if _objects.get((str(folder), name)) is future:
                    del _objects[(str(folder), name)]
            return compile_object(obj_dir, compiler, flags, source)
    return obj, failed


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
    linked = subprocess.run([compiler, *DRIVER, *flags, *objects, "-o", str(exe)], capture_output=True, text=True)
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

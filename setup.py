"""Maps the top-level folders to import names and builds the C++ kernels for this machine's CPU (or, for a
portable install, once per CPU level: kernels/variants.py)."""
import importlib.machinery
import os
import platform
import shutil
import sys
import runpy
import sysconfig
from pathlib import Path

from setuptools import find_packages, setup

FOLDERS = {"engine": "llmchat.engine", "tui": "llmchat.tui", "kernels": "llmchat.kernels"}
KERNEL_SOURCES = [  # the torch-free core (one file per kernel family) + the torch binding layer
    "kernels/csrc/core/attention.cpp",
    "kernels/csrc/core/norm.cpp",
    "kernels/csrc/core/rotary.cpp",
    "kernels/csrc/core/elementwise.cpp",
    "kernels/csrc/core/gemv.cpp",
    "kernels/csrc/core/packed_linear.cpp",
    "kernels/csrc/core/amx_linear.cpp",
    "kernels/csrc/core/lora.cpp",
    "kernels/csrc/core/decoder_stack.cpp",
    "kernels/csrc/core/quant_linear.cpp",
    "kernels/csrc/core/quant_tiles.cpp",
    "kernels/csrc/core/quant_tiles_super.cpp",
    "kernels/csrc/core/quant_tiles_neon.cpp",
    "kernels/csrc/core/gguf_tiles.cpp",
    "kernels/csrc/core/cpu_features.cpp",
    "kernels/csrc/torch/bindings.cpp",
    "kernels/csrc/torch/gemv_binding.cpp",
    "kernels/csrc/torch/lora_binding.cpp",
    "kernels/csrc/torch/decoder_stack_binding.cpp",
    "kernels/csrc/torch/quant_binding.cpp",
]
PROBE_SOURCES = ["kernels/csrc/probe/cpu_probe.cpp", "kernels/csrc/core/cpu_features.cpp"]  # llmchat.kernels._cpu
NO_COMPILER = (
    "llmchat: no C++ compiler found, so the CPU kernels cannot be built. Install one and retry: "
    "Debian/Ubuntu `sudo apt install g++`, Fedora `sudo dnf install gcc-c++`, macOS `xcode-select --install`."
)


def mapped_packages():
    packages, package_dir = [], {}
    for folder, name in FOLDERS.items():
        package_dir[name] = folder
        packages.append(name)
        for sub in find_packages(folder):
            packages.append(f"{name}.{sub}")
    return packages, package_dir


def native_flags():
    """Compile for the CPU doing the install (LLMCHAT_KERNELS_ARCH_FLAGS overrides)."""
    if "LLMCHAT_KERNELS_ARCH_FLAGS" in os.environ:
        return os.environ["LLMCHAT_KERNELS_ARCH_FLAGS"].split()
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return ["-mcpu=native"]
    return ["-march=native"]


def kernel_builds():
    """(module name, arch flags) of each kernels extension: one for this CPU, or with LLMCHAT_KERNELS_VARIANTS
    (portable, or level names) one per CPU level, which the loader chooses from at import."""
    spec = os.environ.get("LLMCHAT_KERNELS_VARIANTS", "").strip()
    if not spec:
        return [("llmchat.kernels._C", native_flags())]
    if "LLMCHAT_KERNELS_ARCH_FLAGS" in os.environ:
        sys.exit("llmchat: set LLMCHAT_KERNELS_VARIANTS or LLMCHAT_KERNELS_ARCH_FLAGS, not both")
    variants = runpy.run_path(str(Path(__file__).with_name("kernels") / "variants.py"))
    try:
        levels = variants["requested"](spec, platform.machine())
    except ValueError as exc:
        sys.exit(f"llmchat: {exc}")
    return [(f"llmchat.kernels._C_{v.name}", list(v.flags)) for v in levels]


def find_compiler():
    candidates = [os.environ.get("CXX"), (sysconfig.get_config_var("CXX") or "").split(" ")[0], "c++", "g++", "clang++"]
    return next((c for c in candidates if c and shutil.which(c)), None)


def kernel_extensions():
    from setuptools import Extension
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    builds = kernel_builds()

    class BuildKernels(BuildExtension):
        def run(self):
            if find_compiler() is None:
                raise RuntimeError(NO_COMPILER)
            self.remove_other_builds()
            super().run()

        def build_extension(self, ext):
            """Each extension compiles into its own folder: the levels (and the probe) share source files."""
            base = self.build_temp
            self.build_temp = os.path.join(base, ext.name.rsplit(".", 1)[-1])
            try:
                super().build_extension(ext)
            finally:
                self.build_temp = base

        def remove_other_builds(self):
            """An in-place (editable) build replaces the kernels of an earlier one made the other way (one
            level or portable), which the loader would otherwise still find."""
            if not self.inplace:
                return
            keep = {Path(self.get_ext_fullpath(ext.name)).name for ext in self.extensions}
            folder = Path(self.get_ext_fullpath("llmchat.kernels._C")).parent
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                for old in [*folder.glob("_C" + suffix), *folder.glob("_C_*" + suffix)]:
                    if old.name not in keep:
                        old.unlink()

    common = ["-O3", "-std=c++17", "-Wno-maybe-uninitialized"]
    kernels = [CppExtension(name, KERNEL_SOURCES, extra_compile_args=[*common, *flags]) for name, flags in builds]
    probe = Extension("llmchat.kernels._cpu", PROBE_SOURCES, language="c++", extra_compile_args=["-O2", "-std=c++17"])
    return [*kernels, probe], {"build_ext": BuildKernels.with_options(use_ninja=shutil.which("ninja") is not None)}


packages, package_dir = mapped_packages()
ext_modules, cmdclass = kernel_extensions()

setup(
    packages=packages,
    package_dir=package_dir,
    include_package_data=True,
    package_data={"llmchat.tui.app": ["*.tcss"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)

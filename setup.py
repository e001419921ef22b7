"""Maps the top-level folders to import names and builds the C++ kernels for this machine's CPU."""
import os
import platform
import shutil
import sys
import sysconfig

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
    "kernels/csrc/core/quant_tiles_neon.cpp",
    "kernels/csrc/core/cpu_features.cpp",
    "kernels/csrc/torch/bindings.cpp",
    "kernels/csrc/torch/gemv_binding.cpp",
    "kernels/csrc/torch/lora_binding.cpp",
    "kernels/csrc/torch/decoder_stack_binding.cpp",
    "kernels/csrc/torch/quant_binding.cpp",
]
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
    """Compile for the CPU doing the install (LLMCHAT_KERNELS_ARCH_FLAGS overrides, e.g. for portable wheels)."""
    if "LLMCHAT_KERNELS_ARCH_FLAGS" in os.environ:
        return os.environ["LLMCHAT_KERNELS_ARCH_FLAGS"].split()
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return ["-mcpu=native"]
    return ["-march=native"]


def find_compiler():
    candidates = [os.environ.get("CXX"), (sysconfig.get_config_var("CXX") or "").split(" ")[0], "c++", "g++", "clang++"]
    return next((c for c in candidates if c and shutil.which(c)), None)


def kernel_extension():
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    class BuildKernels(BuildExtension):
        def run(self):
            if find_compiler() is None:
                raise RuntimeError(NO_COMPILER)
            super().run()

    ext = CppExtension(
        "llmchat.kernels._C",
        KERNEL_SOURCES,
        extra_compile_args=["-O3", "-std=c++17", "-Wno-maybe-uninitialized", *native_flags()],
    )
    return [ext], {"build_ext": BuildKernels.with_options(use_ninja=shutil.which("ninja") is not None)}


packages, package_dir = mapped_packages()
ext_modules, cmdclass = kernel_extension()

setup(
    packages=packages,
    package_dir=package_dir,
    include_package_data=True,
    package_data={"llmchat.tui": ["*.tcss"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)

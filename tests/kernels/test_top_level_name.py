"""Python started in a checkout puts the repo root first on sys.path, where this repo's kernels/ folder (installed
as llmchat.kernels) would shadow the PyPI package `kernels` that transformers imports: an `import kernels` there
must get that package, or, without it, what a folder without an __init__.py would give (an empty namespace
package, which transformers reads as "not installed"), and llmchat.kernels must still load beside it."""
from __future__ import annotations

import importlib.machinery
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import kernels, llmchat.kernels
print(kernels.__file__)
print(kernels.WHO)
print(llmchat.kernels.available())
"""


def run_in_checkout(code: str, extra_path: Path | None = None, python: str = sys.executable,
                    cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_import_kernels_in_a_checkout_gets_the_installed_package(tmp_path):
    package = tmp_path / "site" / "kernels"  # a package named kernels, installed outside the checkout
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("WHO = 'the installed kernels'\n")
    proc = run_in_checkout(PROBE, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    file, who, available = proc.stdout.split("\n")[:3]
    assert Path(file).resolve() == (package / "__init__.py").resolve()
    assert who == "the installed kernels"
    assert available == "True"  # our ops load beside it


@pytest.fixture(scope="module")
def python_without_the_package(tmp_path_factory) -> str:
    """A venv holding every package of this environment (links) except PyPI's kernels: the environment of a
    transformers 5.25+ user without it (a --no-deps install, or one that removed it)."""
    tmp_path = tmp_path_factory.mktemp("no-kernels-env")
    venv = tmp_path / "no-kernels"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = str(venv / ("Scripts" if os.name == "nt" else "bin") / "python")
    target = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    sources = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    for folder in dict.fromkeys(Path(p) for p in sources):
        for entry in folder.iterdir() if folder.is_dir() else []:
            if entry.name == "kernels" or entry.name.startswith("kernels-") or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
    found = run_in_checkout("import importlib.util; print(importlib.util.find_spec('kernels'))", python=python, cwd=tmp_path)
    assert found.stdout.strip() == "None", found.stdout + found.stderr  # outside the checkout: not there
    return python


def test_import_kernels_in_a_checkout_without_the_package_is_an_empty_namespace(python_without_the_package):
    code = ("import kernels, llmchat.kernels\n"
            "print(getattr(kernels, '__file__', None), getattr(kernels, '__version__', 'N/A'), kernels.__path__)\n"
            "try:\n    from kernels import get_kernel\nexcept ImportError:\n    print('no get_kernel')\n"
            "try:\n    import kernels.layer\nexcept ModuleNotFoundError as e:\n    print('missing', e.name)\n"
            "print(llmchat.kernels.available())\n")
    proc = run_in_checkout(code, python=python_without_the_package)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == ["None N/A []", "no get_kernel", "missing kernels.layer", "True"]


CHECK = "from transformers.utils import is_kernels_available; print(is_kernels_available())"


def test_transformers_kernels_check_in_a_checkout_without_the_package(python_without_the_package):
    """transformers 5.25+ finds the folder with find_spec, then imports it when no distribution has its name: that
    import must not raise (it did: ModuleNotFoundError from kernels/__init__.py, which ended any program importing
    transformers from the checkout's directory)."""
    proc = run_in_checkout(CHECK, python=python_without_the_package)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]


def test_transformers_kernels_check_in_a_checkout_with_the_package(tmp_path):
    """PyPI's kernels where this environment has it (transformers 5.25+ requires it), else a stand-in distribution
    of a version transformers accepts: from the repo root transformers sees what it sees anywhere else."""
    extra = None
    spec = importlib.machinery.PathFinder.find_spec("kernels", [p for p in sys.path if Path(p or os.curdir).resolve() != ROOT])
    if spec is None:
        from transformers.utils import import_utils

        version = import_utils.KERNELS_MIN_VERSION
        extra = tmp_path / "site"
        (extra / "kernels").mkdir(parents=True)
        (extra / "kernels" / "__init__.py").write_text(f"__version__ = {version!r}\n")
        (extra / f"kernels-{version}.dist-info").mkdir()
        (extra / f"kernels-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: kernels\nVersion: {version}\n")
    code = CHECK + "\nimport kernels\nprint(kernels.__file__)\n"
    here, elsewhere = run_in_checkout(code, extra), run_in_checkout(code, extra, cwd=tmp_path)
    assert here.returncode == 0, here.stderr
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert here.stdout == elsewhere.stdout
    available, file = here.stdout.split("\n")[:2]
    assert not Path(file).resolve().is_relative_to(ROOT)
    if extra is not None:
        assert available == "True"

"""Python started in a checkout puts the repo root first on sys.path, where this repo's kernels/ folder (installed
as llmchat.kernels) would shadow the PyPI package `kernels` that transformers imports: an `import kernels` there
must get that package, or fail as if the folder were not there, and llmchat.kernels must still load beside it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import kernels, llmchat.kernels
print(kernels.__file__)
print(kernels.WHO)
print(llmchat.kernels.available())
"""


def run_in_checkout(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


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


def test_import_kernels_in_a_checkout_without_the_package_fails_as_missing():
    code = ("try:\n    import kernels\nexcept ModuleNotFoundError as e:\n    print('missing', e.name)\n"
            "else:\n    print('found', kernels.__file__)\n"
            "import llmchat.kernels\nprint(llmchat.kernels.available())\n")
    proc = run_in_checkout(code)
    assert proc.returncode == 0, proc.stderr
    first, available = proc.stdout.split("\n")[:2]
    # this venv may have the PyPI package (transformers 5.25+ requires it): then it is the one found
    assert first == "missing kernels" or (first.startswith("found ") and not first[6:].startswith(str(ROOT) + os.sep + "kernels"))
    assert available == "True"

"""Kernel tests need the compiled extension: fail loudly (never skip) when it is missing."""
import platform
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# ARM-only files: the emulated ARM job of CI runs them (.ci/arm/inside); elsewhere they are not collected,
# rather than skipped
if platform.machine() not in ("aarch64", "arm64"):
    collect_ignore = ["test_quant_neon_tiles_on_arm.py"]


@pytest.fixture(scope="session", autouse=True)
def kernels_built():
    import llmchat.kernels as kernels

    assert kernels.available(), f"llmchat kernels extension not built: {kernels.load_error()}"

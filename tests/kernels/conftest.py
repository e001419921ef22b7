"""Kernel tests need the compiled extension: fail loudly (never skip) when it is missing."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def kernels_built():
    import llmchat.kernels as kernels

    assert kernels.available(), f"llmchat kernels extension not built: {kernels.load_error()}"

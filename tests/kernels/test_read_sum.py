"""The benchmark's memory probes (engine/bench/kernels.py ReadProbe): read_sum and read_runs_sum."""
from __future__ import annotations


def test_read_sum_matches_torch():
    import torch

    import llmchat.kernels as K

    x = torch.randn(3 * 65536 + 17)
    assert abs(K.read_sum(x) - x.double().sum().item()) < 1e-2


def test_read_runs_sum_matches_torch_and_checks_its_runs():
    import pytest
    import torch

    import llmchat.kernels as K

    x = torch.randn(50 * 4096 + 3)
    starts = torch.randperm(50)[:37] * 4096 + 3  # out of order, not aligned
    want = sum(x[s:s + 4096].double().sum().item() for s in starts.tolist())
    assert abs(K.read_runs_sum(x, starts, 4096) - want) < 1e-2
    with pytest.raises(RuntimeError, match="outside"):
        K.read_runs_sum(x, torch.tensor([50 * 4096]), 4096)
    with pytest.raises(ValueError, match="run_starts must be Long"):
        K.read_runs_sum(x, starts.int(), 4096)

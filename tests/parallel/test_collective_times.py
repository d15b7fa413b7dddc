"""FSDP's timed collectives on the torch this runs (2.12+: ``*_single``) and on torch 2.11 (without them)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from workbench.parallel.strategies.collective_times import CollectiveTimes, TimedAllGather, TimedReduceScatter


@pytest.fixture
def one_rank_group(free_port):
    """A one-rank gloo world in this process, closed after the test."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.mark.parametrize("torch_2_11", [False, True], ids=["this-torch", "without-single-calls"])
def test_timed_collectives_run_and_count(one_rank_group, monkeypatch, torch_2_11):
    if torch_2_11:  # torch 2.11 has only all_gather_into_tensor / reduce_scatter_tensor
        monkeypatch.delattr(dist, "all_gather_single", raising=False)
        monkeypatch.delattr(dist, "reduce_scatter_single", raising=False)
    times = CollectiveTimes()
    source, gathered = torch.arange(4.0), torch.zeros(4)
    assert TimedAllGather(times)(gathered, source, one_rank_group) is None
    assert torch.equal(gathered, source)
    reduced = torch.zeros(4)
    TimedReduceScatter(times)(reduced, source * 2, one_rank_group, dist.ReduceOp.SUM)
    assert torch.equal(reduced, source * 2)
    assert times.calls == 2 and times.take() > 0

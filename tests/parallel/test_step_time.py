"""DDP's step-time split on 2 gloo ranks: each bucket's all-reduce timed by the comm hook, the part still in
flight after backward's compute counted as comm and the rest as overlapped; the hook keeps DDP's result."""

from __future__ import annotations

import time

import pytest
import torch

from tests.gloo_ranks import run_on_gloo_ranks
from workbench import models
from workbench.parallel.strategies.data_parallel import BucketTimes, DataParallel, timed_allreduce_hook
from workbench.train.step_time import PHASES, StepClock


def _timed_backwards(rank: int, world_size: int) -> dict:
    """Three timed backwards of a 9-layer MLP in 1-MB buckets (the last kept's report and bucket spans), and
    how far the averaged gradient is from one process's on both ranks' batches."""
    from torch.nn.parallel import DistributedDataParallel

    strategy = DataParallel()
    torch.manual_seed(0)
    ddp = DistributedDataParallel(models.mlp(512, 10, hidden=(512,) * 8), bucket_cap_mb=1)
    ddp.register_comm_hook(strategy._buckets, timed_allreduce_hook)  # what DataParallel.wrap registers
    batches = [(torch.randn(256, 512), torch.randint(0, 10, (256,))) for _ in range(world_size)]
    x, y = batches[rank]
    for _ in range(3):  # DDP rebuilds its buckets after the first step
        ddp.zero_grad()
        clock = StepClock(torch.device("cpu"), started=time.perf_counter())
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        clock.mark("forward")
        strategy.backward(loss, clock)
    torch.manual_seed(0)
    model = models.mlp(512, 10, hidden=(512,) * 8)
    whole_x, whole_y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    torch.nn.functional.cross_entropy(model(whole_x), whole_y).backward()
    difference = (ddp.module[1].weight.grad - model[1].weight.grad).abs().max() / model[
        1
    ].weight.grad.abs().max()
    # small results only: the queue's pipe is read after the ranks end
    return {"report": clock.report(), "spans": list(strategy._buckets.spans), "difference": float(difference)}


def test_ddp_backward_splits_into_compute_exposed_and_overlapped_all_reduce(free_port):
    for result in run_on_gloo_ranks(_timed_backwards, 2, free_port()):
        report, spans = result["report"], result["spans"]
        assert len(spans) >= 8  # 8 MB of gradients in 1-MB buckets, each all-reduce timed
        assert all(ready < done for ready, done in spans)
        assert report["backward"] > 0 and report["comm"] > 0
        assert report["comm_overlapped"] > 0  # buckets sent while earlier layers' gradients were computed
        assert sum(report[phase] for phase in PHASES) == pytest.approx(report["total"])
        assert result["difference"] < 1e-5  # the hook is DDP's average: one process's gradient


@pytest.mark.parametrize(
    ("spans", "window", "expected"),
    [
        ([(1.0, 2.5), (3.0, 4.0)], (0.0, 4.2), (1.0, 1.5)),  # the last bucket's send is exposed
        ([(1.0, 2.0), (1.5, 2.5)], (0.0, 3.0), (1.0, 0.5)),  # overlapping sends count once
        ([(1.0, 1.2), (2.0, 2.1)], (0.0, 2.0), (0.0, 0.2)),  # ended after backward: not past its end
    ],
)
def test_exposed_is_what_was_in_flight_after_the_last_bucket_was_ready(spans, window, expected):
    exposed, overlapped = BucketTimes(spans=spans).split(*window)
    assert (exposed, overlapped) == pytest.approx(expected)

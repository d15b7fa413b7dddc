"""Interactive ranks on GPUs: nccl with one GPU per rank where there are enough, gloo ranks otherwise, and a
CUDA tensor pulled back to the notebook on the CPU."""

from __future__ import annotations

import pytest
import torch

from workbench.parallel.launching.rank_pool import RankPool

pytestmark = pytest.mark.gpu


def test_ranks_take_one_gpu_each_or_run_on_gloo_and_pull_cuda_tensors_to_the_cpu():
    gpus = torch.cuda.device_count()
    nprocs = min(gpus, 2) if gpus >= 2 else 2
    with RankPool(nprocs, threads_per_process=1) as pool:
        backend = "nccl" if gpus >= nprocs else "gloo"
        assert pool.describe().startswith(f"{nprocs} processes ({backend}")
        run = pool.run(
            "on = torch.device('cuda', rank % torch.cuda.device_count())\n"
            "t = torch.ones(1, device=on) * (rank + 1)\n"
            "if dist.get_backend() == 'nccl':\n"
            "    dist.all_reduce(t)\n"
            "print(dist.get_backend(), device, t.device)"
        )
        assert not run.failed, run.cells
        if backend == "nccl":
            assert [run.text(r).split()[1] for r in pool.ranks] == [f"cuda:{r}" for r in pool.ranks]
        pulled = pool.pull("t")
        assert all(t.device.type == "cpu" for t in pulled)
        if backend == "nccl":
            assert [t.item() for t in pulled] == [3.0, 3.0]
